"""Fused runs: a hot program's straight-line arithmetic compiled into LLVM functions, lane-parallel.

The engine (`native.py`) runs one instruction at a time over every lane of a group, as the
reference does: each instruction reads its source rows from the register file and writes its
destination row back, and costs a dispatch. For a run of arithmetic instructions (no stores, no
control, nothing that can fault) the order does not matter: every lane's values depend only on
its own registers and predicates, so running the whole run for one lane, then the next, gives the
same bits. That holds for loads of shared memory too, which nothing in the run writes, once the
engine has checked that none would fault (a gemm's tile loads and multiply-adds become one run).
QEMU's translation blocks do this for guest code; here a hot program's runs become
LLVM IR, built with llvmlite (the LLVM numba is built on) and compiled to machine code, one
function per run that takes 16 lanes at a time (`WIDTH`) through every instruction of the run
with their registers held in vector registers: each register row is read once and written once
per run, not once per instruction. A run that shuffles (a warp reduction's butterfly) takes a
whole warp at a time instead, so that every lane's source is in its vector.

What each operation computes is written a second time, in LLVM IR, in `fused_ir.py` (over the lanes of
`fused_lanes.py`), to mean exactly what `native_values.py` and `native.memory` mean; this module finds the
runs, compiles them and enters them in the program's table. `tests/test_translated.py` runs its
arithmetic and shared-memory cases fused against the reference (special values, every modifier,
divergent groups, loads that would fault), and `LAPIS_SIM=compare` fuses every run that runs.

A run (`runs`) is a stretch of instructions with an entry in `EMITTERS`, none of them a branch
target but the first. A run followed by an unconditional branch to another run (a loop's body,
its branch back and its compare) is also compiled as one function with that run (`chain`),
which the scheduler calls when the group runs alone (no other group waits to be scheduled). A run
followed by a conditional branch back to its start (a loop as the compiler lays it out) is also
compiled as a loop run to its end (`loop`, `fused_loops.py`), which the scheduler calls when no lanes
wait below the loop's exit.

After each launch the scheduler adds the launch's counts to the program's (`fuse_hot`) and
compiles the runs that threads have run `SimtCore.FUSE_AFTER` times in all: compiling costs
about 2 ms per instruction (two fifths of it building the IR in Python; a tiny GPT's 1,102 runs of 8,533
instructions took 17.7 s, 10.7 of them in LLVM), so only hot runs pay, once per machine.
Each function's address and length go into its run's first table row (`RUN_FN`, `RUN_LEN`,
`CHAIN_FN`, `CHAIN_LEN`, `LOOP_FN`, `LOOP_LEN`; a run's loads in `RUN_LOADS`, the warp size of a run that
shuffles in `RUN_WARP`); the native scheduler calls it there (one that shuffles only where every block is
whole warps) and counts the instructions as issued. The object code is kept on disk, under
$LAPIS_CACHE_DIR/fused or ~/.cache/lapis/fused, keyed by the rows it was made from, these files and
the host CPU; LAPIS_CACHE_DIR=off keeps none.
"""

import hashlib
import os
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import llvmlite
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import njit

import lapis.hardware.simt.translate as tr
from lapis.hardware.simt.fused_ir import EMITTERS, emit_run, emits
from lapis.hardware.simt.fused_lanes import PT, WIDTH
from lapis.hardware.simt.fused_loops import emit_loop
from lapis.hardware.simt.translate import OP, Translation

# Where each kind of compiled function goes in its first row: (the function's address, its instructions).
COLUMNS_OF = {"run": (tr.RUN_FN, tr.RUN_LEN), "chain": (tr.CHAIN_FN, tr.CHAIN_LEN), "loop": (tr.LOOP_FN, tr.LOOP_LEN)}


def runs(table: np.ndarray) -> np.ndarray:
    """(first pc, length) of each run, one per row: consecutive instructions the emitters take, none of them a
    branch target but the first (a group arriving at a target starts there), so that every instruction of a
    run executes as often as its first.

    A run may hold loads of whole words from shared memory (LDS of 4, 8 or 16 bytes, unguarded) whose address
    register no earlier instruction of the run writes: the engine checks and counts each of them, from the
    registers as they are before the run, before it calls the run (`native_scheduler.check_loads`). Nothing
    in a run stores to shared memory, so a lane's loads see what they would see one instruction at a time.

    It may hold shuffles: such a run takes a whole warp per vector (`fuse`), so a lane's source is in its
    vector, and the engine calls it only on whole warps."""
    kinds = table[:, tr.KIND]
    targets = set(table[kinds == OP["BRA"], tr.BVAL].tolist())
    found, start, written = [], None, set()
    for pc, kind in enumerate(kinds.tolist() + [-1]):
        load = kind == OP["LDS"]
        fusable = kind >= 0 and emits(table[pc])
        if start is not None and (not fusable or pc in targets or load and not loads_before(table[pc], written)):
            found.append((start, pc - start))
            start = None
        if fusable and (not load or loads_before(table[pc], set())):
            if start is None:
                start, written = pc, set()
            written.update(EMITTERS[kind].writes(table[pc]))
    return np.array(found, np.int64).reshape(-1, 2)


def loads_before(t: np.ndarray, written: set) -> bool:
    """Whether a run may hold the LDS in table row t after instructions that write the rows `written`: whole
    words, unguarded, through an address register none of them writes."""
    return t[tr.WIDTH] >= 4 and t[tr.GUARD] == PT and not t[tr.GUARD_NEG] and ("R", int(t[tr.A])) not in written


def chain(table: np.ndarray, start: int, length: int, run_at: dict[int, int]) -> list[int] | None:
    """The pcs of the run at `start`, the unconditional branch after it and the run at its target, when there
    are both (a loop's body, its branch back and its compare: one call where the group runs alone); else None."""
    after = start + length
    if after >= len(table):
        return None
    t = table[after]
    target = int(t[tr.BVAL])
    if t[tr.KIND] != OP["BRA"] or t[tr.GUARD] != PT or t[tr.GUARD_NEG] or target not in run_at:
        return None
    return [*range(start, after), after, *range(target, target + run_at[target])]


def loop(table: np.ndarray, start: int, length: int) -> list[int] | None:
    """The pcs of the run at `start` and the conditional branch after it, when that branch goes back to the
    run's start (a loop as the compiler lays it out, tested at its bottom); else None."""
    after = start + length
    if after >= len(table):
        return None
    t = table[after]
    if t[tr.KIND] != OP["BRA"] or (t[tr.GUARD] == PT and not t[tr.GUARD_NEG]) or t[tr.BVAL] != start:
        return None
    return [*range(start, after), after]


class _Jit:
    """One LLVM JIT for the process: a target machine for the host CPU and an MCJIT engine that object
    code is added to (from the disk cache or freshly compiled)."""

    def __init__(self):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.cpu, self.features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        target = llvm.Target.from_default_triple()
        self.machine = target.create_target_machine(cpu=self.cpu, features=self.features, opt=2, jit=True)
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.machine)
        self.loaded: dict[str, dict[str, int]] = {}         # module key -> function name -> address
        self.lock = threading.Lock()
        here = Path(__file__)
        self.source_hash = hashlib.sha256(b"".join(path.read_bytes() for path in (
            here, *(here.with_name(f"{name}.py") for name in ("fused_ir", "fused_lanes", "fused_loops")),
            Path(tr.__file__)))).hexdigest()

    def object_code(self, module: ir.Module) -> bytes:
        """Machine code for the module. The IR is already what LLVM's optimizer would make of it (each row
        read once, operands hoisted into the entry block), so it goes straight to code generation at -O2:
        optimizing first doubled the compile time and made the code no faster."""
        parsed = llvm.parse_assembly(str(module))
        parsed.verify()
        return self.machine.emit_object(parsed)

    def load(self, key: str, build: Callable[[], ir.Module], names: list[str]) -> dict[str, int]:
        """The addresses of `names`, from the module `build` makes (its object code cached on disk under key)."""
        with self.lock:
            if key not in self.loaded:
                directory = _cache_directory()
                path = directory / f"{key}.o" if directory is not None else None
                code = _read(path)
                if code is None:
                    code = self.object_code(build())
                    _write(path, code)
                self.engine.add_object_file(llvm.ObjectFileRef.from_data(code))
                self.engine.finalize_object()
                self.loaded[key] = {name: self.engine.get_function_address(name) for name in names}
            return self.loaded[key]


_JIT: _Jit | None = None
_JIT_LOCK = threading.Lock()


def _jit() -> _Jit:
    """The process's one JIT. Made under a lock: two GPUs' command processors may fuse at once, and a second
    engine would leave the first's functions (whose addresses tables hold) to be freed with it."""
    global _JIT
    with _JIT_LOCK:
        if _JIT is None:
            _JIT = _Jit()
        return _JIT


def _cache_directory() -> Path | None:
    configured = os.environ.get("LAPIS_CACHE_DIR")
    if configured is not None and configured.strip().lower() in ("", "off", "0", "none"):
        return None
    return (Path(configured) if configured else Path.home() / ".cache" / "lapis") / "fused"


def _read(path: Path | None) -> bytes | None:
    """The object code kept at path, or None when there is none or it is damaged: the file starts with the
    code's SHA-256, and LLVM would crash the process on an object file that is not one."""
    try:
        stored = path.read_bytes() if path is not None else None
    except OSError:
        return None
    if stored is None or hashlib.sha256(stored[32:]).digest() != stored[:32]:
        return None
    return stored[32:]


def _write(path: Path | None, code: bytes) -> None:
    """The code's SHA-256, then the code, written atomically (a temporary file, then a rename), so a reader
    never sees half an object."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as f:
            f.write(hashlib.sha256(code).digest() + code)
        os.replace(f.name, path)
    except OSError:
        pass


def fuse_hot(translation: Translation, counts: np.ndarray, after: int, stride: int, warp_size: int) -> int:
    """Add a launch's per-pc thread-instruction counts to the program's, and compile the runs that threads
    have now run `after` times, for register files of rows `stride` lanes long (and warps of `warp_size`
    lanes, for runs that shuffle); returns how many it compiled
    or loaded. At a translation's first launch, runs compiled before (by this process or an earlier one)
    are loaded from the disk cache at once. (Compiling costs about as much per instruction as fusing saves
    per instruction and thread, so a run's length does not enter.)"""
    loaded = 0
    if translation.unfused is None:
        translation.unfused = runs(translation.table)
        translation.executed = np.zeros(len(translation.translated), np.int64)
        kept = _compiled_before(translation.table, translation.unfused, stride, warp_size)
        if kept.any():
            loaded = _fuse_pending(translation, kept, stride, warp_size)
    pending = translation.unfused
    if not pending.size:                        # nothing left to fuse: no counting either
        return loaded
    if not _count(translation.executed, counts, pending, after):
        return loaded
    hot = translation.executed[pending[:, 0]] >= after
    return loaded + _fuse_pending(translation, hot, stride, warp_size)


@njit(cache=True, _nrt=False)
def _count(executed, counts, pending, after):
    """Add a launch's per-pc counts to `executed`; whether a pending run's first pc has reached `after`. (One
    compiled loop: as numpy operations, this cost a tiny kernel's launch more than its run.)"""
    for pc in range(len(counts)):
        executed[pc] += counts[pc]
    for run in range(len(pending)):
        if executed[pending[run, 0]] >= after:
            return True
    return False


def _compiled_before(table: np.ndarray, found: np.ndarray, stride: int, warp_size: int) -> np.ndarray:
    """Which of the runs `found` the disk cache has object code for, for rows `stride` lanes long."""
    directory, run_at = _cache_directory(), dict(found.tolist())
    if directory is None or not found.size:
        return np.zeros(len(found), bool)
    return np.array([(directory / f"{_key(table, _traces(table, run, run_at), stride, warp_size)}.o").exists()
                     for run in found.tolist()])


def _fuse_pending(translation: Translation, chosen: np.ndarray, stride: int, warp_size: int) -> int:
    """Fuse the runs of `translation.unfused` that `chosen` marks."""
    pending = translation.unfused
    translation.unfused = pending[~chosen]
    try:
        return fuse(translation.table, [tuple(run) for run in pending[chosen].tolist()], stride, warp_size)
    except Exception as error:                  # the runs stay with the engine, whose results are the same
        translation.unfused = pending[:0]
        warnings.warn(f"lapis: compiling a kernel's hot arithmetic failed ({error!r}); it runs unfused",
                      RuntimeWarning, stacklevel=3)
        return 0


def fuse(table: np.ndarray, found: list[tuple[int, int]], stride: int, warp_size: int) -> int:
    """Compile the runs `found` ((first pc, length) each) of a program's table, each with its `chain` and
    `loop` where it has them, for register files of rows `stride` lanes long, and enter them in it (the engine
    calls one only on such a file); returns how many runs. Each run is a module of its own, kept on disk."""
    jit, run_at = _jit(), dict(runs(table).tolist())
    for run in found:
        traces = _traces(table, run, run_at)
        key, width = _key(table, traces, stride, warp_size), _width(table, traces, warp_size)
        names = {trace: f"lapis_fused_{key}_{trace[0]}_{trace[1]}" for trace in traces}

        def build(key=key, traces=traces, names=names, width=width) -> ir.Module:
            module = ir.Module(name=key)
            module.triple = llvm.get_process_triple()
            for trace, pcs in traces.items():
                (emit_loop if trace[1] == "loop" else emit_run)(module, names[trace], table, pcs, stride, width)
            return module

        addresses = jit.load(key, build, list(names.values()))
        for (start, what), pcs in traces.items():
            fn, length = COLUMNS_OF[what]
            table[start, fn], table[start, tr.RUN_STRIDE] = addresses[names[start, what]], stride
            table[start, tr.RUN_WARP] = warp_size if width == warp_size else 0
            if what == "run":
                table[start, tr.RUN_LOADS] = np.count_nonzero(table[pcs, tr.KIND] == OP["LDS"])
            table[start, length] = len(pcs)             # last: the engine reads the length first
    return len(found)


def _traces(table: np.ndarray, run: tuple[int, int], run_at: dict[int, int]) -> dict[tuple[int, str], list[int]]:
    """(first pc, "run", "chain" or "loop") -> pcs: what one run is compiled as (`run_at`: the program's runs)."""
    start, length = run
    traces = {(start, "run"): list(range(start, start + length))}
    for what, pcs in (("chain", chain(table, start, length, run_at)), ("loop", loop(table, start, length))):
        if pcs is not None and not (table[pcs, tr.KIND] == OP["LDS"]).any():   # loads are checked per run
            traces[start, what] = pcs
    return traces


def _width(table: np.ndarray, traces: dict, warp_size: int) -> int:
    """The lanes per vector of a run's functions: a warp's where a trace shuffles, else `WIDTH`."""
    shuffles = any((table[pcs, tr.KIND] == OP["SHFL"]).any() for pcs in traces.values())
    return warp_size if shuffles else WIDTH


def _key(table: np.ndarray, traces: dict, stride: int, warp_size: int) -> str:
    """The disk cache's name for a run's module: its rows, its traces, the row length, the lanes per vector,
    these files and the CPU."""
    jit = _jit()
    rows = np.concatenate([table[pcs, :tr.RUN_FN] for pcs in traces.values()])
    shape = (sorted(traces), stride, _width(table, traces, warp_size))
    return hashlib.sha256(rows.tobytes() + repr(shape).encode() + jit.source_hash.encode()
                          + f"{llvmlite.__version__} {jit.cpu} {jit.features}".encode()).hexdigest()[:32]

