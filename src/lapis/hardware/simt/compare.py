"""The check that translated code changes nothing: every dispatch run both ways and compared.

With `LAPIS_SIM=compare`, the SIMT core runs each dispatch first with the reference executor
alone, then again, from the same memory, with the translated code (`translated.py`), and
checks that both write the same bytes to the same global addresses, leave the same cache
contents and the same counters (per-instruction warp and thread counts, sectors, L2 hits and
misses, DRAM and PCIe bytes, shared-memory wavefronts, FLOPs by precision), or raise the same
fault. A difference raises `ExecutorMismatch`. A run stopped at the dispatch's deadline (its time
limit, or a cancel) is not compared: where it stopped depends on the host's clock; its fault is raised.

Between the two runs only the bytes the reference's global stores and atomics wrote are put
back (they record what they overwrite): host threads keep writing their own memory (queue
rings, signals) while a kernel runs, and those writes must survive. It is slow (every kernel
runs twice, once in numpy) and meant for tests: `make test-compare` runs every test this way
and `tests/test_translated.py` the kernel tests.
"""

import dataclasses
import time
from typing import TYPE_CHECKING

import numpy as np

from lapis.hardware.simt.launch import Counters, Dispatch, KernelFault

if TYPE_CHECKING:
    from lapis.hardware.simt.scheduler import SimtCore


class ExecutorMismatch(AssertionError):
    """The translated code and the reference executor disagree."""


def compare_executors(core: "SimtCore", d: Dispatch, resident_blocks: int) -> Counters:
    """Run `d` with the reference executor, then translated from the same state; raise on any difference."""
    memories = (core.vram, core.sysmem)
    caches = core.data_caches
    before = _cache_state(caches)
    reference, log = _outcome(core, d, resident_blocks, False)
    if _stopped_at_deadline(reference, d):
        raise reference[1]
    ref_written = _addresses(log)
    ref_values = [memory.u8[at] for memory, at in zip(memories, ref_written, strict=True)]
    ref_caches = _cache_state(caches)
    for system, at, old in reversed(log):                 # undo the reference's writes, last first
        memories[system].u8[at] = old
    for array, kept in zip((*caches.tags, caches.dirty), before, strict=True):
        array[:] = kept
    translated, log = _outcome(core, d, resident_blocks, True)
    if _stopped_at_deadline(translated, d):
        raise translated[1]
    written = _addresses(log)
    program = f"{len(d.program)}-instruction kernel, grid {d.grid}, block {d.block}"
    if reference[0] != translated[0]:
        if isinstance(reference[0], dict) and isinstance(translated[0], dict):
            raise ExecutorMismatch(f"{program}: counters differ: {_diff(reference[0], translated[0])}")
        raise ExecutorMismatch(f"{program}: the reference gave {_text(reference[0])}, "
                               f"translated code {_text(translated[0])}")
    if isinstance(reference[0], str):
        raise translated[1]
    for name, memory, ref_at, at, values in zip(("device", "host"), memories, ref_written, written, ref_values,
                                                strict=True):
        if not np.array_equal(ref_at, at):
            raise ExecutorMismatch(f"{program}: the two wrote different {name} addresses")
        if not np.array_equal(memory.u8[at], values):
            first = int(at[np.flatnonzero(memory.u8[at] != values)[0]])
            raise ExecutorMismatch(f"{program}: {name} memory differs, first at physical address {first:#x}")
    if not all(np.array_equal(a, b) for a, b in zip(ref_caches, _cache_state(caches), strict=True)):
        raise ExecutorMismatch(f"{program}: the caches' contents differ")
    return translated[1]


def _cache_state(caches) -> list[np.ndarray]:
    """A copy of every level's tags and the L2's dirty bits."""
    return [a.copy() for a in (*caches.tags, caches.dirty)]


def _outcome(core: "SimtCore", d: Dispatch, resident_blocks: int, translated: bool):
    """((counters as a dict, counters) or (fault text, the fault), the writes) of one execution."""
    core.write_log = []
    try:
        try:
            counters = core.execute(d, resident_blocks, translated)
            fields = dataclasses.asdict(counters)
            outcome = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in fields.items()}, counters
        except KernelFault as fault:
            outcome = str(fault), fault
        return outcome, core.write_log
    finally:
        core.write_log = None


def _stopped_at_deadline(outcome, d: Dispatch) -> bool:
    """Whether a run faulted with the dispatch's deadline passed (stopped by it, as far as a comparison can tell)."""
    return isinstance(outcome[1], KernelFault) and time.monotonic() >= d.deadline


def _addresses(log) -> list[np.ndarray]:
    """The sorted byte addresses written in device memory and in host memory."""
    written = [[at for system, at, _ in log if system == kind] for kind in (False, True)]
    return [np.unique(np.concatenate(w)) if w else np.zeros(0, np.int64) for w in written]


def _text(outcome) -> str:
    return repr(outcome) if isinstance(outcome, str) else "counters"


def _diff(a: dict, b: dict) -> str:
    return "; ".join(f"{k}: reference {a[k]}, translated {b[k]}" for k in a if a[k] != b[k])
