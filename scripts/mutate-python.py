#!/usr/bin/env python3
"""Mutation testing of the Python client (python/cohort), on Python's own `ast` module.

Why this exists: StrykerJS (`bun run mutate`) reaches only the TypeScript, and no Python mutation tool
(mutmut, cosmic-ray, ...) can be installed on these machines, which have no package index. This runner is
stdlib only (Python 3.9+, for ast.unparse).

Run it from the repository root, with the tests that pin the file as one shell command:

    /usr/bin/python3 scripts/mutate-python.py python/cohort/_envelope.py \
        --test "PATH=/usr/bin:/bin node_modules/.bin/bun test test/python-client.test.ts"

Options: several files, with one --test for all or one --test per file (in order); --in NAME (repeatable)
keeps the sites inside a function or class of that name; --only-lines A-B (repeatable) keeps the sites on
those lines; --limit N runs N mutants per file, spread evenly over its sites; --timeout S per mutant (default:
five times the unmutated run, at least 10 s); --list prints the mutants without running anything; --json OUT
writes one record per mutant.

How it works: each mutant changes one site of the file's syntax tree, and the whole module is written back
with ast.unparse (comments and layout are lost, which no test reads). The test command must pass on the
pristine file and on its unparsed, unmutated tree before any mutant runs: otherwise a kill would prove
nothing. A mutant is killed when the command exits non-zero or runs past the timeout, and survives when it
exits 0. The original bytes (and mtime) are written back after every mutant, on any exception and on SIGINT,
SIGTERM or SIGHUP, and the file's cached bytecode is deleted before each run and after each restore, so a
stale .pyc never stands in for a mutant (PYTHONDONTWRITEBYTECODE=1 is set too, but tests that spawn Python
with an environment of their own do not pass it on).

The operators, each applied one at a time at one site:
- compare:   == <-> !=, < -> <= and >, <= -> < and >=, > -> >= and <, >= -> > and <=, in <-> not in,
             is <-> is not
- arith:     + <-> -, * <-> /, / -> // , // -> /, % -> *, << <-> >>, & <-> | (in expressions and in +=, ...)
- bool:      and <-> or
- not:       `not x` -> `x`
- constant:  n -> n + 1 and n - 1 (0 -> 1 only); True <-> False
- string:    a string of 1 to 20 characters compared with (==, in, ...) -> "" (other strings are left alone:
             messages are pinned by the tests' literal lines, and a changed message is no changed behaviour)
- drop:      a statement of a function body -> `pass`. Not dropped: docstrings, the only statement of a body
             (that empties a branch, which `return-none`, `not` and the compare swaps already reach), `return`
             and `raise` (their removal is mostly a crash the tests see at once; `return-none` covers returns),
             `pass`, `global`/`nonlocal`, and nested def/class (a NameError, not a behaviour).
- return-none: `return x` -> `return None` (where x is not already None)
Type annotations, docstrings and f-strings' literal parts are never mutated.
"""
import argparse
import ast
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

# ------------------------------------------------------------------------------------------ the operators

_COMPARE_SWAPS: Dict[type, Tuple[type, ...]] = {
    ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,),
    ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt, ast.GtE),
    ast.Gt: (ast.GtE, ast.Lt), ast.GtE: (ast.Gt, ast.LtE),
    ast.In: (ast.NotIn,), ast.NotIn: (ast.In,),
    ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,),
}
_ARITH_SWAPS: Dict[type, Tuple[type, ...]] = {
    ast.Add: (ast.Sub,), ast.Sub: (ast.Add,),
    ast.Mult: (ast.Div,), ast.Div: (ast.Mult, ast.FloorDiv), ast.FloorDiv: (ast.Div,),
    ast.Mod: (ast.Mult,),
    ast.LShift: (ast.RShift,), ast.RShift: (ast.LShift,),
    ast.BitAnd: (ast.BitOr,), ast.BitOr: (ast.BitAnd,),
}
_SHORT_STRING = 20
#: Fields that hold type annotations: mutating them changes nothing at run time.
_ANNOTATION_FIELDS = {"annotation", "returns", "type_comment"}
_UNDROPPABLE = (ast.Return, ast.Raise, ast.Pass, ast.Global, ast.Nonlocal,
                ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass
class Site:
    """One mutation: where it is, what it does, and how to apply it to a fresh parse of the same source."""
    line: int
    end_line: int
    col: int
    end_col: int
    operator: str
    scope: str
    apply: Callable[[], ast.AST] = field(repr=False)
    #: The node as it is and as the mutant has it (for display).
    before: Callable[[], str] = field(repr=False)


def _is_docstring(body: List[ast.stmt], index: int, owner: ast.AST) -> bool:
    return (index == 0 and isinstance(owner, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str))


class _Collector:
    """Walks a tree in a fixed order and lists its sites; the same source always gives the same list, so a
    mutant is named by its index and applied to a fresh parse."""

    def __init__(self) -> None:
        self.sites: List[Site] = []

    def collect(self, tree: ast.Module) -> List[Site]:
        self._visit(tree, None, None, None, [], False)
        return self.sites

    def _site(self, node: ast.AST, operator: str, scope: List[str], apply: Callable[[], ast.AST]) -> None:
        self.sites.append(Site(
            line=node.lineno, end_line=getattr(node, "end_lineno", node.lineno) or node.lineno,
            col=node.col_offset, end_col=getattr(node, "end_col_offset", -1) or -1,
            operator=operator, scope=".".join(scope) or "<module>", apply=apply, before=lambda n=node: ast.unparse(n)))

    def _visit(self, node: ast.AST, parent: Optional[ast.AST], field_name: Optional[str], index: Optional[int],
               scope: List[str], in_function: bool) -> None:
        if isinstance(node, ast.JoinedStr):
            # Only the expressions inside an f-string, never its literal text or format specs.
            for value in node.values:
                if isinstance(value, ast.FormattedValue):
                    self._visit(value.value, value, "value", None, scope, in_function)
            return
        self._sites_at(node, parent, field_name, index, scope, in_function)
        inner_scope, inner_function = scope, in_function
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner_scope = scope + [node.name]
            inner_function = in_function or not isinstance(node, ast.ClassDef)
        for name, value in ast.iter_fields(node):
            if name in _ANNOTATION_FIELDS:
                continue
            # A def's decorators and defaults run in the enclosing scope.
            child_scope = scope if name in ("decorator_list", "args", "bases", "keywords") else inner_scope
            child_function = in_function if child_scope is scope else inner_function
            if isinstance(value, list):
                for i, child in enumerate(value):
                    if isinstance(child, ast.AST):
                        self._visit(child, node, name, i, child_scope, child_function)
            elif isinstance(value, ast.AST):
                self._visit(value, node, name, None, child_scope, child_function)

    def _sites_at(self, node: ast.AST, parent: Optional[ast.AST], field_name: Optional[str], index: Optional[int],
                  scope: List[str], in_function: bool) -> None:
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                for new in _COMPARE_SWAPS.get(type(op), ()):
                    self._site(node, "compare", scope, _set_op(node, i, new))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)):
            for new in _ARITH_SWAPS.get(type(node.op), ()):
                self._site(node, "arith", scope, _set_attr(node, "op", new))
        elif isinstance(node, ast.BoolOp):
            self._site(node, "bool", scope, _set_attr(node, "op", ast.Or if isinstance(node.op, ast.And) else ast.And))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and parent is not None:
            self._site(node, "not", scope, _replace_child(parent, field_name, index, lambda: node.operand))
        elif isinstance(node, ast.Constant) and parent is not None:
            value = node.value
            if isinstance(value, bool):
                self._site(node, "constant", scope, _set_value(node, not value))
            elif isinstance(value, int):
                for new in ([1] if value == 0 else [value + 1, value - 1]):
                    self._site(node, "constant", scope, _set_value(node, new))
            elif isinstance(value, str) and 0 < len(value) <= _SHORT_STRING and _compared(parent, field_name):
                self._site(node, "string", scope, _set_value(node, ""))
        elif isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            self._site(node, "return-none", scope, _set_attr_node(node, "value", lambda: ast.Constant(value=None)))
        if (isinstance(node, ast.stmt) and in_function and parent is not None and isinstance(index, int)
                and not isinstance(node, _UNDROPPABLE)):
            body = getattr(parent, field_name)
            real = [s for i, s in enumerate(body) if not _is_docstring(body, i, parent)]
            if len(real) > 1 and not _is_docstring(body, index, parent):
                self._site(node, "drop", scope, _replace_child(parent, field_name, index, lambda: ast.Pass()))


def _compared(parent: ast.AST, field_name: Optional[str]) -> bool:
    # `x == "a"`, `"a" in s`, and `x in ("a", "b")` (a container compared with is marked by sites_of).
    return isinstance(parent, ast.Compare) or isinstance(parent, (ast.Tuple, ast.Set, ast.List)) and getattr(
        parent, "_cohort_in_compare", False)


def _set_op(node: ast.Compare, i: int, new: type) -> Callable[[], ast.AST]:
    def apply() -> ast.AST:
        node.ops[i] = new()
        return node
    return apply


def _set_attr(node: ast.AST, name: str, new: type) -> Callable[[], ast.AST]:
    def apply() -> ast.AST:
        setattr(node, name, new())
        return node
    return apply


def _set_attr_node(node: ast.AST, name: str, make: Callable[[], ast.AST]) -> Callable[[], ast.AST]:
    def apply() -> ast.AST:
        setattr(node, name, make())
        return node
    return apply


def _set_value(node: ast.Constant, new: object) -> Callable[[], ast.AST]:
    def apply() -> ast.AST:
        node.value = new
        return node
    return apply


def _replace_child(parent: ast.AST, field_name: Optional[str], index: Optional[int],
                   make: Callable[[], ast.AST]) -> Callable[[], ast.AST]:
    def apply() -> ast.AST:
        new = make()
        if index is None:
            old = getattr(parent, field_name)
            setattr(parent, field_name, new)
        else:
            old = getattr(parent, field_name)[index]
            getattr(parent, field_name)[index] = new
        return new if hasattr(new, "lineno") else ast.copy_location(new, old)
    return apply


def _mark_compared_containers(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in [node.left] + node.comparators:
                if isinstance(operand, (ast.Tuple, ast.Set, ast.List)):
                    operand._cohort_in_compare = True  # type: ignore[attr-defined]


def sites_of(source: str) -> Tuple[ast.Module, List[Site]]:
    tree = ast.parse(source)
    _mark_compared_containers(tree)
    return tree, _Collector().collect(tree)


@dataclass
class Mutant:
    file: str
    index: int
    line: int
    operator: str
    scope: str
    original: str
    mutated: str
    source: str = field(repr=False, default="")
    status: str = "pending"  # killed | survived | timeout | invalid | pending
    seconds: float = 0.0


def _shown(lines: List[str], site: Site, before: str, after: str) -> Tuple[str, str]:
    """The site's line as it is and as the mutant has it; a site over several lines shows its nodes."""
    if site.line == site.end_line and site.end_col >= 0:
        text = lines[site.line - 1]
        # col offsets count UTF-8 bytes.
        raw = text.encode("utf-8")
        mutated_line = (raw[:site.col] + after.encode("utf-8") + raw[site.end_col:]).decode("utf-8", "replace")
        return text.strip(), mutated_line.strip()
    clip = lambda s: s if len(s) <= 160 else s[:157] + "..."  # noqa: E731
    return clip(" ".join(before.split())), clip(" ".join(after.split()))


def mutants_of(path: str, source: str, scopes: Sequence[str], line_ranges: Sequence[Tuple[int, int]]) -> List[Mutant]:
    _, sites = sites_of(source)
    baseline = ast.unparse(ast.parse(source))
    lines = source.splitlines()
    out: List[Mutant] = []
    for index, site in enumerate(sites):
        if scopes and not any(name in site.scope.split(".") or name == site.scope for name in scopes):
            continue
        if line_ranges and not any(a <= site.line <= b for a, b in line_ranges):
            continue
        tree, fresh = sites_of(source)
        target = fresh[index]
        before = target.before()
        changed = target.apply()
        mutated_source = ast.unparse(tree)
        if mutated_source == baseline:
            continue
        after = ast.unparse(changed) if not isinstance(changed, ast.Pass) else "pass"
        if site.operator == "drop":
            after = "pass"
        original, mutated = _shown(lines, site, before, after)
        out.append(Mutant(path, index, site.line, site.operator, site.scope, original, mutated, mutated_source))
    return out


def _spread(mutants: List[Mutant], limit: Optional[int]) -> List[Mutant]:
    if limit is None or limit >= len(mutants):
        return mutants
    if limit <= 0:
        return []
    step = len(mutants) / limit
    return [mutants[int(i * step)] for i in range(limit)]


# ------------------------------------------------------------------------------------------ the runner

class _Pristine:
    """The file's original bytes and times, written back on demand and whenever this process is stopped."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as handle:
            self.data = handle.read()
        stat = os.stat(path)
        self.mode = stat.st_mode & 0o7777
        self.times = (stat.st_atime_ns, stat.st_mtime_ns)
        self.dirty = False

    def write(self, data: bytes) -> None:
        # Through a temporary file and a rename: another process importing the module sees one whole version.
        directory = os.path.dirname(os.path.abspath(self.path))
        fd, temporary = tempfile.mkstemp(prefix=".mutant-", suffix=".py", dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(temporary, self.mode)
            os.replace(temporary, self.path)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise
        drop_bytecode(self.path)

    def mutate(self, source: str) -> None:
        self.dirty = True
        self.write(source.encode("utf-8"))

    def restore(self) -> None:
        if not self.dirty:
            return
        self.write(self.data)
        os.utime(self.path, ns=self.times)
        drop_bytecode(self.path)
        with open(self.path, "rb") as handle:
            if handle.read() != self.data:
                raise RuntimeError(f"{self.path} could not be restored byte for byte")
        self.dirty = False


def drop_bytecode(path: str) -> None:
    """The module's cached bytecode, for every interpreter: a .pyc validated by mtime and size could otherwise
    stand in for a mutant of the same size written within the same second."""
    directory, name = os.path.split(os.path.abspath(path))
    stem = os.path.splitext(name)[0]
    for cached in glob.glob(os.path.join(directory, "__pycache__", f"{stem}.*.pyc")):
        try:
            os.unlink(cached)
        except FileNotFoundError:
            pass


def run_tests(command: str, timeout: Optional[float]) -> Tuple[str, float]:
    """'passed', 'failed' or 'timeout', and the seconds it took. The command runs in its own session, so a
    timeout or an interrupt ends every process it started."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    started = time.monotonic()
    child = subprocess.Popen(command, shell=True, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        code = child.wait(timeout=timeout)
        return ("passed" if code == 0 else "failed"), time.monotonic() - started
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started
    finally:
        # Whatever it left behind (a timed-out child, a server it started) goes with its session.
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        child.wait()


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _line_range(text: str) -> Tuple[int, int]:
    first, _, last = text.partition("-")
    try:
        a, b = int(first), int(last or first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--only-lines {text!r}: expected A-B, two line numbers") from None
    if a > b:
        raise argparse.ArgumentTypeError(f"--only-lines {text!r}: the first line is after the last")
    return a, b


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="Mutation testing of Python files against a test command.")
    parser.add_argument("files", nargs="+", help="the Python files to mutate, one at a time")
    parser.add_argument("--test", action="append", required=True,
                        help="the shell command that tests the file (once for all files, or once per file)")
    parser.add_argument("--in", dest="scopes", action="append", default=[], metavar="NAME",
                        help="only sites inside a function or class of this name (repeatable)")
    parser.add_argument("--only-lines", action="append", default=[], type=_line_range, metavar="A-B",
                        help="only sites on these lines (repeatable)")
    parser.add_argument("--limit", type=int, help="at most N mutants per file, spread over its sites")
    parser.add_argument("--timeout", type=float, help="seconds per mutant (default: 5x the clean run, >= 10)")
    parser.add_argument("--list", action="store_true", help="print the mutants and run nothing")
    parser.add_argument("--json", metavar="OUT", help="write every mutant's record here")
    args = parser.parse_args(argv)
    if len(args.test) not in (1, len(args.files)):
        parser.error(f"--test is given {len(args.test)} times for {len(args.files)} files: give it once, or once per file")
    tests = args.test * len(args.files) if len(args.test) == 1 else args.test
    if sys.version_info < (3, 9):
        parser.error("ast.unparse needs Python 3.9 or later")

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupt)

    records: List[Mutant] = []
    summaries = []
    started_all = time.monotonic()
    for path, command in zip(args.files, tests):
        if not os.path.isfile(path):
            print(f"mutate-python: {path} is not a file", file=sys.stderr)
            return 2
        with open(path, "rb") as handle:
            source = handle.read().decode("utf-8")
        mutants = _spread(mutants_of(path, source, args.scopes, args.only_lines), args.limit)
        if args.list:
            for m in mutants:
                print(f"{m.file}:{m.line} [{m.operator}] {m.scope}: {m.original}  ->  {m.mutated}")
            print(f"{path}: {len(mutants)} mutants")
            continue
        pristine = _Pristine(path)
        started = time.monotonic()
        try:
            verdict, clean_s = run_tests(command, None)
            if verdict != "passed":
                print(f"mutate-python: the tests fail on the unmutated {path}: fix them first ({command})", file=sys.stderr)
                return 2
            pristine.mutate(ast.unparse(ast.parse(source)))
            verdict, unparsed_s = run_tests(command, max(60.0, 10 * clean_s))
            pristine.restore()
            if verdict != "passed":
                print(f"mutate-python: the tests fail on {path} as ast.unparse writes it, unmutated, so its mutants "
                      "would prove nothing (do the tests read comments or line numbers?)", file=sys.stderr)
                return 2
            timeout = args.timeout if args.timeout is not None else max(10.0, 5 * max(clean_s, unparsed_s))
            print(f"{path}: {len(mutants)} mutants, clean run {clean_s:.1f} s, timeout {timeout:.0f} s", file=sys.stderr)
            for n, mutant in enumerate(mutants, 1):
                try:
                    compile(mutant.source, path, "exec")
                except SyntaxError:
                    mutant.status = "invalid"
                    continue
                pristine.mutate(mutant.source)
                try:
                    verdict, mutant.seconds = run_tests(command, timeout)
                finally:
                    pristine.restore()
                mutant.status = {"passed": "survived", "failed": "killed", "timeout": "timeout"}[verdict]
                print(f"  [{n}/{len(mutants)}] {mutant.status:8} {path}:{mutant.line} {mutant.operator}", file=sys.stderr)
        except KeyboardInterrupt:
            print(f"mutate-python: interrupted; {path} is restored", file=sys.stderr)
            return 130
        finally:
            pristine.restore()
        ran = [m for m in mutants if m.status in ("killed", "survived", "timeout")]
        summaries.append((path, ran, time.monotonic() - started))
        records.extend(mutants)

    if args.list:
        return 0
    for path, ran, _ in summaries:
        for m in ran:
            if m.status == "survived":
                print(f"SURVIVED {m.file}:{m.line} {m.operator} (in {m.scope})\n    - {m.original}\n    + {m.mutated}")
    total = {"mutants": 0, "killed": 0, "timeout": 0, "survived": 0}
    for path, ran, seconds in summaries:
        counts = {s: sum(1 for m in ran if m.status == s) for s in ("killed", "timeout", "survived")}
        score = 100.0 * (counts["killed"] + counts["timeout"]) / len(ran) if ran else 100.0
        print(f"{path}: {len(ran)} mutants, {counts['killed']} killed, {counts['timeout']} timed out, "
              f"{counts['survived']} survived, score {score:.1f}%, {seconds:.0f} s")
        total["mutants"] += len(ran)
        for key in counts:
            total[key] += counts[key]
    if len(summaries) > 1 and total["mutants"]:
        score = 100.0 * (total["killed"] + total["timeout"]) / total["mutants"]
        print(f"all: {total['mutants']} mutants, {total['killed']} killed, {total['timeout']} timed out, "
              f"{total['survived']} survived, score {score:.1f}%, {time.monotonic() - started_all:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump([{k: v for k, v in asdict(m).items() if k != "source"} for m in records], handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
