//! CPU reductions: the sum or average of N buffers into an output, in-place
//! add, and scale, for f32 and bf16 (bf16 is stored as u16 and accumulated
//! in f32, rounded to nearest-even on store).
//!
//! Buffers come from JavaScript typed-array views, so a pointer may be
//! unaligned and the output may be one of the inputs: elements are read and
//! written through raw pointers, never through overlapping Rust slices.
//! Large buffers are split across threads. The order of the additions is
//! fixed (input 0, then 1, …) so results are reproducible and comparable to a
//! reference written the same way.

use crate::error::{fail, status};

/// Below this many elements a reduction runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 18;
/// Each thread takes at least this many elements.
const CHUNK_MIN: usize = 1 << 16;

#[derive(Clone, Copy)]
enum Reduce {
    Sum,
    Average,
}

/// A numeric element type as it sits in memory.
trait Element: Copy {
    fn load(p: *const Self) -> f32;
    fn store(p: *mut Self, value: f32);
}

impl Element for f32 {
    #[inline(always)]
    fn load(p: *const f32) -> f32 {
        unsafe { p.read_unaligned() }
    }
    #[inline(always)]
    fn store(p: *mut f32, value: f32) {
        unsafe { p.write_unaligned(value) }
    }
}

/// bf16: the high half of an f32.
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Bf16(u16);

#[inline(always)]
fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

#[inline(always)]
fn f32_to_bf16(value: f32) -> u16 {
    let bits = value.to_bits();
    if value.is_nan() {
        // Keep it a (quiet) NaN whatever its payload.
        return ((bits >> 16) as u16) | 0x0040;
    }
    // Round to nearest, ties to even.
    let rounding = 0x7fff + ((bits >> 16) & 1);
    ((bits.wrapping_add(rounding)) >> 16) as u16
}

impl Element for Bf16 {
    #[inline(always)]
    fn load(p: *const Bf16) -> f32 {
        bf16_to_f32(unsafe { (p as *const u16).read_unaligned() })
    }
    #[inline(always)]
    fn store(p: *mut Bf16, value: f32) {
        unsafe { (p as *mut u16).write_unaligned(f32_to_bf16(value)) }
    }
}

/// Run `work(from, to)` over `0..len`, split across threads when it is large.
fn split(len: usize, work: impl Fn(usize, usize) + Sync) {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if len < PARALLEL_MIN || threads < 2 {
        work(0, len);
        return;
    }
    let parts = threads.min(len / CHUNK_MIN).max(1);
    let per = len.div_ceil(parts);
    std::thread::scope(|scope| {
        let work = &work;
        for part in 1..parts {
            let (from, to) = (part * per, ((part + 1) * per).min(len));
            if from < to {
                scope.spawn(move || work(from, to));
            }
        }
        work(0, per.min(len));
    });
}

/// Elements reduced together: small enough to stay in registers, long enough to vectorise.
const LANES: usize = 32;

/// out[from..to] = the sum (or average) of the inputs, in input order.
///
/// A chunk of every input is read before the chunk of the output is written,
/// so an output that is one of the inputs is fine; and the per-element order
/// of the additions is the same as one element at a time.
#[inline(always)]
fn reduce_range<T: Element, const AVERAGE: bool>(sources: &[usize], out: usize, from: usize, to: usize) {
    let out = out as *mut T;
    let first = sources[0] as *const T;
    let rest = &sources[1..];
    let divisor = sources.len() as f32;
    let mut at = from;
    while at + LANES <= to {
        let mut acc = [0f32; LANES];
        let head = unsafe { first.add(at) };
        for (k, slot) in acc.iter_mut().enumerate() {
            *slot = T::load(unsafe { head.add(k) });
        }
        for &source in rest {
            let chunk = unsafe { (source as *const T).add(at) };
            for (k, slot) in acc.iter_mut().enumerate() {
                *slot += T::load(unsafe { chunk.add(k) });
            }
        }
        let chunk = unsafe { out.add(at) };
        for (k, value) in acc.iter().enumerate() {
            T::store(unsafe { chunk.add(k) }, if AVERAGE { *value / divisor } else { *value });
        }
        at += LANES;
    }
    for i in at..to {
        let mut acc = T::load(unsafe { first.add(i) });
        for &source in rest {
            acc += T::load(unsafe { (source as *const T).add(i) });
        }
        T::store(unsafe { out.add(i) }, if AVERAGE { acc / divisor } else { acc });
    }
}

/// Outputs at least this large (in elements) are written with streaming stores:
/// they bypass the cache, so the output's lines are not read first, and a
/// 64 MiB result would not stay in cache anyway.
#[cfg(target_arch = "x86_64")]
const STREAM_MIN: usize = 1 << 20;

/// `reduce_range` for f32 with AVX, writing whole chunks with non-temporal
/// (streaming) stores, 32-byte aligned. The values are the same; only the way
/// they reach memory differs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn reduce_range_streaming<const AVERAGE: bool>(sources: &[usize], out: usize, from: usize, to: usize) {
    use std::arch::x86_64::{__m256, _mm256_add_ps, _mm256_div_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_stream_ps, _mm_sfence};
    let target = out as *mut f32;
    let mut at = from;
    while at < to && (target.add(at) as usize) % 32 != 0 {
        at += 1;
    }
    reduce_range::<f32, AVERAGE>(sources, out, from, at);
    let first = sources[0] as *const f32;
    let rest = &sources[1..];
    let divisor = _mm256_set1_ps(sources.len() as f32);
    while at + LANES <= to {
        let head = first.add(at);
        let mut acc: [__m256; LANES / 8] = [
            _mm256_loadu_ps(head),
            _mm256_loadu_ps(head.add(8)),
            _mm256_loadu_ps(head.add(16)),
            _mm256_loadu_ps(head.add(24)),
        ];
        for &source in rest {
            let chunk = (source as *const f32).add(at);
            for (q, lane) in acc.iter_mut().enumerate() {
                *lane = _mm256_add_ps(*lane, _mm256_loadu_ps(chunk.add(8 * q)));
            }
        }
        for (q, lane) in acc.iter().enumerate() {
            let value = if AVERAGE { _mm256_div_ps(*lane, divisor) } else { *lane };
            _mm256_stream_ps(target.add(at + 8 * q), value);
        }
        at += LANES;
    }
    _mm_sfence();
    reduce_range::<f32, AVERAGE>(sources, out, at, to);
}

fn reduce_f32(inputs: *const *const f32, count: usize, len: usize, out: *mut f32, how: Reduce) -> i32 {
    // Streaming needs AVX (every x86_64 of the last decade); elsewhere the chunked loop does.
    #[cfg(target_arch = "x86_64")]
    if len >= STREAM_MIN && count > 0 && !inputs.is_null() && !out.is_null() && std::is_x86_feature_detected!("avx") {
        let sources: Vec<usize> = (0..count).map(|i| unsafe { *inputs.add(i) } as usize).collect();
        if sources.contains(&0) {
            return fail(status::INVALID, "an input pointer is null");
        }
        let out = out as usize;
        match how {
            Reduce::Sum => split(len, |from, to| unsafe { reduce_range_streaming::<false>(&sources, out, from, to) }),
            Reduce::Average => split(len, |from, to| unsafe { reduce_range_streaming::<true>(&sources, out, from, to) }),
        }
        return status::OK;
    }
    reduce(inputs, count, len, out, how)
}

fn reduce<T: Element>(inputs: *const *const T, count: usize, len: usize, out: *mut T, how: Reduce) -> i32 {
    if count == 0 || inputs.is_null() || (len > 0 && out.is_null()) {
        return fail(status::INVALID, "a reduction needs at least one input and an output");
    }
    let sources: Vec<usize> = (0..count).map(|i| unsafe { *inputs.add(i) } as usize).collect();
    if len > 0 && sources.contains(&0) {
        return fail(status::INVALID, "an input pointer is null");
    }
    let out = out as usize;
    match how {
        Reduce::Sum => split(len, |from, to| reduce_range::<T, false>(&sources, out, from, to)),
        Reduce::Average => split(len, |from, to| reduce_range::<T, true>(&sources, out, from, to)),
    }
    status::OK
}

fn add<T: Element>(acc: *mut T, x: *const T, len: usize) -> i32 {
    if len > 0 && (acc.is_null() || x.is_null()) {
        return fail(status::INVALID, "add needs two buffers");
    }
    let (acc, x) = (acc as usize, x as usize);
    split(len, |from, to| {
        let (acc, x) = (acc as *mut T, x as *const T);
        for i in from..to {
            let sum = T::load(unsafe { acc.add(i) }) + T::load(unsafe { x.add(i) });
            T::store(unsafe { acc.add(i) }, sum);
        }
    });
    status::OK
}

fn scale<T: Element>(buffer: *mut T, len: usize, factor: f32) -> i32 {
    if len > 0 && buffer.is_null() {
        return fail(status::INVALID, "scale needs a buffer");
    }
    let buffer = buffer as usize;
    split(len, |from, to| {
        let buffer = buffer as *mut T;
        for i in from..to {
            let value = T::load(unsafe { buffer.add(i) }) * factor;
            T::store(unsafe { buffer.add(i) }, value);
        }
    });
    status::OK
}

#[no_mangle]
pub extern "C" fn cohort_sum_f32(inputs: *const *const f32, count: usize, len: usize, out: *mut f32) -> i32 {
    reduce_f32(inputs, count, len, out, Reduce::Sum)
}

#[no_mangle]
pub extern "C" fn cohort_average_f32(inputs: *const *const f32, count: usize, len: usize, out: *mut f32) -> i32 {
    reduce_f32(inputs, count, len, out, Reduce::Average)
}

#[no_mangle]
pub extern "C" fn cohort_sum_bf16(inputs: *const *const u16, count: usize, len: usize, out: *mut u16) -> i32 {
    reduce(inputs as *const *const Bf16, count, len, out as *mut Bf16, Reduce::Sum)
}

#[no_mangle]
pub extern "C" fn cohort_average_bf16(inputs: *const *const u16, count: usize, len: usize, out: *mut u16) -> i32 {
    reduce(inputs as *const *const Bf16, count, len, out as *mut Bf16, Reduce::Average)
}

#[no_mangle]
pub extern "C" fn cohort_add_f32(acc: *mut f32, x: *const f32, len: usize) -> i32 {
    add(acc, x, len)
}

#[no_mangle]
pub extern "C" fn cohort_add_bf16(acc: *mut u16, x: *const u16, len: usize) -> i32 {
    add(acc as *mut Bf16, x as *const Bf16, len)
}

#[no_mangle]
pub extern "C" fn cohort_scale_f32(buffer: *mut f32, len: usize, factor: f32) -> i32 {
    scale(buffer, len, factor)
}

#[no_mangle]
pub extern "C" fn cohort_scale_bf16(buffer: *mut u16, len: usize, factor: f32) -> i32 {
    scale(buffer as *mut Bf16, len, factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to even (1.0).
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
    }
}
