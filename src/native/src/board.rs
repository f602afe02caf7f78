//! A host's board: small all-reduces among the ranks of one host in shared
//! memory, without a round trip through the relay's socket.
//!
//! The board is a segment the relay creates and every rank of the host maps.
//! Each rank owns a slot: it writes its contribution there and announces its
//! arrival in one atomic word; the last to arrive folds every slot into the
//! result area and ends the round in that same word, waking the others with
//! a futex. The relay owns the mode: it turns the board on only when every
//! member of the host is taking part in every round (nobody idle, joining or
//! dead, and the host alone in the world), and off, cancelling any round in
//! progress, the moment that stops being true. A cancelled round is redone
//! through the relay's ordinary path, which knows who is missing.
//!
//! The state word (u32) packs everything a round's outcome depends on, so
//! that the outcome is decided by one compare-and-swap and never by a
//! second write that could race with it:
//!
//! | bit 31 | bits 30..16 | bits 15..8 | bits 7..0 |
//! |---|---|---|---|
//! | on | generation (bumped at every turn-on) | round (bumped when a round ends well) | arrivals |
//!
//! A rank that arrived in round `r` of generation `g` reads its outcome from
//! the word alone: the round number moved on, the result is there (the next
//! round cannot end without this rank, so the result area still holds it);
//! the board is off or its generation changed with the round unmoved, the
//! round was cancelled. Cancelling never bumps the round.

use crate::error::{fail, status};
use crate::process::Timespec;
use std::ffi::{c_int, c_long};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const STATE: usize = 0;
const MEMBERS: usize = 64;
const SLOT_BYTES: usize = 68;
const MAX_SLOTS: usize = 72;
const MASK: usize = 80;
const HEADERS: usize = 128;
const HEADER_BYTES: usize = 64;
/// The most slots a board has: the member mask is one u64.
const SLOT_LIMIT: usize = 64;
const RESULT: usize = HEADERS + HEADER_BYTES * SLOT_LIMIT;

const ON: u32 = 1 << 31;
const GENERATION_SHIFT: u32 = 16;
const GENERATION_MASK: u32 = 0x7fff;
const ROUND_SHIFT: u32 = 8;
const ROUND_MASK: u32 = 0xff;
const ARRIVALS_MASK: u32 = 0xff;

/// What `cohort_board_arrive` and `cohort_board_wait` return.
const DONE: i32 = 0;
const FALLBACK: i32 = 1;
const PENDING: i32 = 2;

/// Ops, as the binding numbers them.
const OP_SUM: u32 = 0;
const OP_AVG: u32 = 1;

// The slot header: the contribution's length (floats), op and weight, the state word the rank's arrival made (its
// ticket: the generation and round it waits on), and the rank's number (the fold adds in rank order).
const H_COUNT: usize = 0;
const H_OP: usize = 4;
const H_WEIGHT: usize = 8;
const H_TICKET: usize = 16;
const H_RANK: usize = 20;

/// The most one rank folds alone (every member's floats together): past it the relay's kernel threads are faster
/// (a review measured the fold of 16 members × 1 MiB at 2–4 ms on this machine, 4 × 1 MiB at 0.19 ms).
const FOLD_LIMIT_BYTES: usize = 4 << 20;

const FUTEX_WAIT: c_int = 0;
const FUTEX_WAKE: c_int = 1;
const SYS_FUTEX: c_long = 202;
const SYS_FUTEX_AARCH64: c_long = 98;

extern "C" {
    fn syscall(number: c_long, ...) -> c_long;
    fn sched_yield() -> c_int;
}

const fn futex_number() -> c_long {
    if cfg!(target_arch = "aarch64") {
        SYS_FUTEX_AARCH64
    } else {
        SYS_FUTEX
    }
}

struct Board {
    base: *mut u8,
}

impl Board {
    fn word(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: the offsets are inside the header, which `cohort_board_init` checked the segment holds, and
        // 4-byte aligned (the segment is page aligned).
        unsafe { &*(self.base.add(offset) as *const AtomicU32) }
    }
    fn state(&self) -> &AtomicU32 {
        self.word(STATE)
    }
    fn mask(&self) -> &AtomicU64 {
        unsafe { &*(self.base.add(MASK) as *const AtomicU64) }
    }
    fn slot_bytes(&self) -> usize {
        self.word(SLOT_BYTES).load(Ordering::Relaxed) as usize
    }
    fn header(&self, slot: usize) -> *mut u8 {
        unsafe { self.base.add(HEADERS + slot * HEADER_BYTES) }
    }
    fn result(&self) -> *mut f32 {
        unsafe { self.base.add(RESULT) as *mut f32 }
    }
    fn data(&self, slot: usize) -> *mut f32 {
        unsafe { self.base.add(RESULT + self.slot_bytes() * (1 + slot)) as *mut f32 }
    }
    fn wake_all(&self) {
        unsafe { syscall(futex_number(), self.state() as *const AtomicU32, FUTEX_WAKE, c_int::MAX) };
    }
    fn sleep_while(&self, seen: u32, timeout: Duration) {
        let span = Timespec { tv_sec: timeout.as_secs() as c_long, tv_nsec: timeout.subsec_nanos() as c_long };
        unsafe { syscall(futex_number(), self.state() as *const AtomicU32, FUTEX_WAIT, seen, &span as *const Timespec) };
    }
}

const fn generation(state: u32) -> u32 {
    (state >> GENERATION_SHIFT) & GENERATION_MASK
}
const fn round(state: u32) -> u32 {
    (state >> ROUND_SHIFT) & ROUND_MASK
}
const fn arrivals(state: u32) -> u32 {
    state & ARRIVALS_MASK
}
/// `state` turned off: the same generation and round, nobody arrived.
const fn off(state: u32) -> u32 {
    (generation(state) << GENERATION_SHIFT) | (round(state) << ROUND_SHIFT)
}

/// The bytes a board of `max_slots` slots of `slot_bytes` each needs.
#[no_mangle]
pub extern "C" fn cohort_board_bytes(slot_bytes: u32, max_slots: u32) -> u64 {
    (RESULT + slot_bytes as usize * (1 + max_slots as usize)) as u64
}

/// Lay out a fresh board (off) in `length` bytes at `base`, for `max_slots` slots of `slot_bytes`.
#[no_mangle]
pub extern "C" fn cohort_board_init(base: *mut u8, length: usize, slot_bytes: u32, max_slots: u32) -> i32 {
    if base.is_null() || (base as usize) % 64 != 0 {
        return fail(status::INVALID, "a board must start on a 64-byte boundary");
    }
    if max_slots == 0 || max_slots as usize > SLOT_LIMIT || slot_bytes == 0 || slot_bytes % 64 != 0 {
        return fail(status::INVALID, format!("a board has 1 to {SLOT_LIMIT} slots of a multiple of 64 bytes, not {max_slots} of {slot_bytes}"));
    }
    let needed = cohort_board_bytes(slot_bytes, max_slots) as usize;
    if length < needed {
        return fail(status::INVALID, format!("a board of {max_slots} slots of {slot_bytes} bytes needs {needed} bytes, not {length}"));
    }
    unsafe { std::ptr::write_bytes(base, 0, RESULT) };
    let board = Board { base };
    board.word(SLOT_BYTES).store(slot_bytes, Ordering::Relaxed);
    board.word(MAX_SLOTS).store(max_slots, Ordering::Relaxed);
    board.state().store(0, Ordering::Release);
    status::OK
}

/// Turn the board on for the slots in `mask` (the relay, when every member of the host takes part in every round).
/// 1: on; 0: it was on already.
///
/// The caller's promise: every rank that arrived in a round cancelled since the last turn-on has seen that round's
/// outcome (the relay turns it on only after a round through its socket that every member was in, so each has come
/// back from the board). A waiter still asleep in a cancelled round whose slot a new mask left out would otherwise
/// read the next round's end as its own.
#[no_mangle]
pub extern "C" fn cohort_board_enable(base: *mut u8, mask: u64) -> i32 {
    let board = Board { base };
    let max = board.word(MAX_SLOTS).load(Ordering::Relaxed);
    if mask == 0 || (max < 64 && mask >> max != 0) {
        return fail(status::INVALID, format!("member mask {mask:#x} names no slot, or one past the board's {max}"));
    }
    let seen = board.state().load(Ordering::Acquire);
    if seen & ON != 0 || arrivals(seen) != 0 {
        return 0;
    }
    board.mask().store(mask, Ordering::Relaxed);
    board.word(MEMBERS).store(mask.count_ones(), Ordering::Relaxed);
    let next_generation = (generation(seen) + 1) & GENERATION_MASK;
    let on = ON | (next_generation << GENERATION_SHIFT) | (round(seen) << ROUND_SHIFT);
    match board.state().compare_exchange(seen, on, Ordering::Release, Ordering::Relaxed) {
        Ok(_) => 1,
        Err(_) => 0,
    }
}

/// Turn the board off, cancelling the round under way (its ranks redo it through the relay). Returns how many
/// ranks had arrived in the cancelled round (0: none, or the board was off).
#[no_mangle]
pub extern "C" fn cohort_board_disable(base: *mut u8) -> i32 {
    let board = Board { base };
    loop {
        let seen = board.state().load(Ordering::Acquire);
        if seen & ON == 0 {
            return 0;
        }
        if board.state().compare_exchange(seen, off(seen), Ordering::AcqRel, Ordering::Acquire).is_ok() {
            if arrivals(seen) > 0 {
                board.wake_all();
            }
            return arrivals(seen) as i32;
        }
    }
}

/// The state word (tests, diagnostics).
#[no_mangle]
pub extern "C" fn cohort_board_state(base: *mut u8) -> u32 {
    Board { base }.state().load(Ordering::Acquire)
}

/// Why the folder cannot fold the round: the members disagree on length or op (the relay's path names them).
fn agreed(board: &Board, mask: u64) -> Option<(usize, u32)> {
    let mut shape = None;
    for slot in (0..SLOT_LIMIT).filter(|slot| mask >> slot & 1 == 1) {
        let header = board.header(slot);
        let count = unsafe { *(header.add(H_COUNT) as *const u32) } as usize;
        let op = unsafe { *(header.add(H_OP) as *const u32) };
        match shape {
            None => shape = Some((count, op)),
            Some(known) if known != (count, op) => return None,
            Some(_) => {}
        }
    }
    shape
}

/// Fold every member's slot into the result with the relay's arithmetic, so that a round gives the same bits
/// whichever path took it (`HostReduction`, the kernels): each contribution multiplied by its weight in f64 and
/// rounded to f32 (as a rank weights its staged copy), added in ascending rank order starting from the first, then
/// an average divided by the member count when every weight is 1, or multiplied by 1 / (the weights' sum) rounded
/// to f32 otherwise (weights that add up to nothing leave the sum). In chunks that stay in L1, so the result is
/// written once, not once per member.
fn fold(board: &Board, mask: u64, count: usize, op: u32) {
    const CHUNK: usize = 512;
    let mut members: Vec<(u32, *const f32, f64)> = (0..SLOT_LIMIT)
        .filter(|slot| mask >> slot & 1 == 1)
        .map(|slot| unsafe {
            let header = board.header(slot);
            (*(header.add(H_RANK) as *const u32), board.data(slot) as *const f32, *(header.add(H_WEIGHT) as *const f64))
        })
        .collect();
    members.sort_by_key(|&(rank, _, _)| rank);
    let unit = members.iter().all(|&(_, _, weight)| weight == 1.0);
    let total_weight: f64 = members.iter().map(|&(_, _, weight)| weight).sum();
    let divisor = members.len() as f32;
    let scale = (1.0 / total_weight) as f32;
    let average = op == OP_AVG && (unit || total_weight > 0.0);
    let result = unsafe { std::slice::from_raw_parts_mut(board.result(), count) };
    let weighted = |value: f32, weight: f64| if weight == 1.0 { value } else { (value as f64 * weight) as f32 };
    let mut start = 0;
    while start < count {
        let length = CHUNK.min(count - start);
        let mut chunk = [0.0f32; CHUNK];
        let chunk = &mut chunk[..length];
        for (index, &(_, data, weight)) in members.iter().enumerate() {
            let input = unsafe { std::slice::from_raw_parts(data.add(start), length) };
            if index == 0 {
                for (out, value) in chunk.iter_mut().zip(input) {
                    *out = weighted(*value, weight);
                }
            } else {
                for (out, value) in chunk.iter_mut().zip(input) {
                    *out += weighted(*value, weight);
                }
            }
        }
        if average {
            for value in chunk.iter_mut() {
                *value = if unit { *value / divisor } else { *value * scale };
            }
        }
        result[start..start + length].copy_from_slice(chunk);
        start += length;
    }
}

fn copy_result(board: &Board, data: *mut f32, count: usize) {
    if count > 0 {
        unsafe { std::ptr::copy_nonoverlapping(board.result(), data, count) };
    }
}

/// The outcome of the round `ticket` names, as the state word `now` tells it.
fn outcome(ticket: u32, now: u32) -> i32 {
    if round(now) != round(ticket) {
        DONE
    } else if now & ON == 0 || generation(now) != generation(ticket) {
        FALLBACK
    } else {
        PENDING
    }
}

/// Take part in the board's next round as `rank`, with `count` floats at `data`: `op` 0 sums, 1 averages, weighted
/// by `weight`. DONE: the result is in `data`. FALLBACK: the board is off, this slot is not a member, the round is
/// too large to fold alone, or it was cancelled: use the relay's path. PENDING: arrived; call `cohort_board_wait`
/// until it says otherwise.
#[no_mangle]
pub extern "C" fn cohort_board_arrive(base: *mut u8, slot: u32, rank: u32, data: *mut f32, count: u32, op: u32, weight: f64) -> i32 {
    let board = Board { base };
    let slot = slot as usize;
    let count = count as usize;
    if slot >= SLOT_LIMIT || slot >= board.word(MAX_SLOTS).load(Ordering::Relaxed) as usize {
        return fail(status::INVALID, format!("slot {slot} is not on this board"));
    }
    if count * 4 > board.slot_bytes() || (op != OP_SUM && op != OP_AVG) || (count > 0 && data.is_null()) {
        return FALLBACK;
    }
    // Refused before anything is copied: a board that is off (every multi-host round) costs a load, not a copy.
    // Every member reads the same member count and length, so they all refuse a round too large alike.
    let on = board.state().load(Ordering::Acquire);
    let members = board.word(MEMBERS).load(Ordering::Relaxed) as usize;
    if on & ON == 0 || board.mask().load(Ordering::Relaxed) >> slot & 1 == 0 || count * 4 * members > FOLD_LIMIT_BYTES {
        return FALLBACK;
    }
    let header = board.header(slot);
    unsafe {
        *(header.add(H_COUNT) as *mut u32) = count as u32;
        *(header.add(H_OP) as *mut u32) = op;
        *(header.add(H_WEIGHT) as *mut f64) = weight;
        *(header.add(H_RANK) as *mut u32) = rank;
        if count > 0 {
            std::ptr::copy_nonoverlapping(data, board.data(slot), count);
        }
    }
    loop {
        let seen = board.state().load(Ordering::Acquire);
        if seen & ON == 0 || board.mask().load(Ordering::Relaxed) >> slot & 1 == 0 {
            return FALLBACK;
        }
        let members = board.word(MEMBERS).load(Ordering::Relaxed);
        let arrived = seen + 1;
        if board.state().compare_exchange(seen, arrived, Ordering::AcqRel, Ordering::Acquire).is_err() {
            continue;
        }
        if arrivals(arrived) < members {
            unsafe { *(header.add(H_TICKET) as *mut u32) = arrived };
            return PENDING;
        }
        // The last to arrive folds, then ends the round in the state word: unless the relay cancelled it meanwhile
        // (a member died or left), every member reads the result from this one compare-and-swap.
        let mask = board.mask().load(Ordering::Relaxed);
        let Some((agreed_count, agreed_op)) = agreed(&board, mask) else {
            // Out of step: cancelled (this round only: a later generation's is not ours to end) and the board off;
            // the relay's path names the ranks.
            if board.state().compare_exchange(arrived, off(arrived), Ordering::AcqRel, Ordering::Acquire).is_ok() {
                board.wake_all();
            }
            return FALLBACK;
        };
        fold(&board, mask, agreed_count, agreed_op);
        let ended = (arrived & !(ARRIVALS_MASK | (ROUND_MASK << ROUND_SHIFT))) | (((round(arrived) + 1) & ROUND_MASK) << ROUND_SHIFT);
        if board.state().compare_exchange(arrived, ended, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return FALLBACK;
        }
        board.wake_all();
        copy_result(&board, data, count);
        return DONE;
    }
}

/// Wait for the round this slot arrived in: spin (yielding the core) for `spin_us`, then sleep on the futex for up
/// to `block_us`. DONE (the result is in `data`), FALLBACK (cancelled) or PENDING (call again: the caller's event
/// loop gets its turn in between).
#[no_mangle]
pub extern "C" fn cohort_board_wait(base: *mut u8, slot: u32, data: *mut f32, count: u32, spin_us: u32, block_us: u32) -> i32 {
    let board = Board { base };
    let slot = slot as usize;
    if slot >= SLOT_LIMIT {
        return fail(status::INVALID, format!("slot {slot} is not on this board"));
    }
    let ticket = unsafe { *(board.header(slot).add(H_TICKET) as *const u32) };
    let start = Instant::now();
    let spin = Duration::from_micros(spin_us as u64);
    let block = Duration::from_micros(block_us as u64);
    loop {
        let now = board.state().load(Ordering::Acquire);
        match outcome(ticket, now) {
            DONE => {
                copy_result(&board, data, count as usize);
                return DONE;
            }
            FALLBACK => return FALLBACK,
            _ => {}
        }
        let waited = start.elapsed();
        if waited < spin {
            // More ranks than cores is the common case on a CPU host: let the one we wait for run.
            unsafe { sched_yield() };
        } else if waited < spin + block {
            board.sleep_while(now, spin + block - waited);
        } else {
            return PENDING;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_reads_the_word_alone() {
        let ticket = ON | (3 << GENERATION_SHIFT) | (7 << ROUND_SHIFT) | 2;
        assert_eq!(outcome(ticket, ON | (3 << GENERATION_SHIFT) | (8 << ROUND_SHIFT)), DONE);
        assert_eq!(outcome(ticket, (3 << GENERATION_SHIFT) | (8 << ROUND_SHIFT)), DONE);
        assert_eq!(outcome(ticket, (3 << GENERATION_SHIFT) | (7 << ROUND_SHIFT)), FALLBACK);
        assert_eq!(outcome(ticket, ON | (4 << GENERATION_SHIFT) | (7 << ROUND_SHIFT)), FALLBACK);
        assert_eq!(outcome(ticket, ON | (3 << GENERATION_SHIFT) | (7 << ROUND_SHIFT) | 3), PENDING);
    }
}
