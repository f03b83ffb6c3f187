"""Layer 0: translated code against the reference executor: the same values, memory, counters and faults."""

import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compare_run
import test_simt as simt
from conftest import Bench, pointers
from lapis.hardware import PTE_WRITABLE
from lapis.hardware.caches import shared_wavefronts
from lapis.hardware.numerics import f64_to_half, float_to_format, half_to_f64
from lapis.hardware.simt import KernelFault, fused, scheduler
from lapis.hardware.simt.fused import fuse_hot
from lapis.hardware.simt.native_counters import (
    SHARED_BYTES,
    SHARED_IDEAL_WAVEFRONTS,
    SHARED_WAVEFRONTS,
    TALLY_SLOTS,
    count_shared,
    lane_sectors,
    run_sectors,
    wavefronts,
)
from lapis.hardware.simt.native_scheduler import PART_ALIGN
from lapis.hardware.simt.native_values import f32_to_bf16_bits, f64_to_f16_bits, half_to_f32_bits, half_value
from lapis.hardware.simt.translate import LOOP_LEN, OPS, RUN_LEN, RUN_LOADS, RUN_WARP, translate
from lapis.hardware.simt.translated import NativeRunner
from lapis.isa import assemble, format_instruction
from test_simt import _run_twice

SPECIAL_FLOATS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.5, 1e-39, -1e-39, 3.4e38, 7.0, 0.5],
                          np.float32)


def float32_words(rng, n: int, columns: int) -> np.ndarray:
    """Words of float32 values, a third of them the special ones (signed zeros, infinities, NaN, subnormals)."""
    x = rng.standard_normal((n, columns)).astype(np.float32) * 100
    special = rng.random((n, columns)) < 0.35
    x[special] = rng.choice(SPECIAL_FLOATS, int(special.sum()))
    return x.view(np.uint32)


def float32_arithmetic(bench, rng, n):
    """FADD, FMUL, FFMA with every modifier (and into its own addend), min and max of signed zeros and
    NaN, compares, conversions; a sum whose bits a MOV and a min read before an FFMA overwrites it."""
    body = """
        FADD R40, R8, -R9 ; FMUL R41, |R8|, 0.5 ; FFMA R42, -R8, R9, -R10 ; FFMA R43, R8, 3.0, R8 ;
        FMNMX.MIN R44, R8, R9 ; FMNMX.MAX R45, R8, -R9 ; FMNMX.MAX R46, R8, -R8 ;
        FSETP.LT.AND P0, R8, R9, PT ; FSETP.NE.OR P1, R8, R9, P0 ; FSETP.GE.XOR P2, |R8|, 1.0, !P1 ;
        SEL R47, R8, R9, P2 ; PLOP.XOR P3, P0, !P2 ; SEL R48, R10, R8, P3 ;
        F2I.S32.F32.TRUNC R49, R8 ; F2I.U32.F32.FLOOR R50, R9 ; F2I.S32.F32.RN R51, R10 ;
        F2I.S64.F32.CEIL R52, R8 ; FRND.RN.F32 R54, R9 ; FRND.TRUNC.F32 R55, R10 ;
        MUFU.RCP R56, R8 ; MUFU.RSQ R57, R9 ; MUFU.SQRT R58, R10 ; MUFU.EX2 R59, R8 ;
        I2F.F32.S32 R60, R11 ; I2F.F32.U32 R61, R11 ; F2F.F64.F32 R62, R8 ;
        FFMA R64, R8, R9, R64 ; FFMA R64, R10, -2.0, -R64 ; FFMA R65, R9, R65, R65 ;
        FADD R66, R8, R9 ; MOV R67, R66 ; FMNMX.MIN R68, R66, R10 ; FFMA R66, R66, R9, R10 ; MUFU.LG2 R69, R9 ;
    """
    words = np.concatenate([float32_words(rng, n, 3), rng.integers(0, 2**32, (n, 1))], axis=1)
    return body, words, 30, {}, []


def float64_arithmetic(bench, rng, n):
    """Register-pair float64: add, multiply, FMA, min and max, compares, conversions both ways."""
    body = """
        F2F.F64.F32 R60, R8 ; F2F.F64.F32 R62, R9 ; F2F.F64.F32 R64, R10 ;
        DADD R40, R60, -R62 ; DMUL R42, |R60|, R64 ; DFMA R44, R60, R62, -R64 ;
        DMNMX.MIN R46, R60, R62 ; DMNMX.MAX R48, -R60, R60 ;
        DSETP.GT.AND P0, R60, R62, PT ; SEL R50, R8, R9, P0 ;
        F2F.F32.F64 R51, R44 ; F2I.S32.F64.RN R52, R42 ; F2I.S64.F64.TRUNC R54, R44 ;
        I2F.F64.S32 R56, R11 ; I2F.F64.U32 R58, R11 ; FRND.FLOOR.F64 R66, R44 ; MOV R53, R66 ;
    """
    words = np.concatenate([float32_words(rng, n, 3), rng.integers(0, 2**32, (n, 1))], axis=1)
    return body, words, 20, {}, []


def float_round_trips(bench, rng, n):
    """float32 to float64 and back in one run, from signaling and quiet NaNs with payloads, infinities, subnormals and
    random bits: LLVM folds a bare round trip into nothing, the CPU's conversions quiet a signaling NaN."""
    body = """
        F2F.F64.F32 R60, R8 ; F2F.F32.F64 R40, R60 ; MOV R41, R60 ; MOV R42, R61 ;
        F2F.F64.F32 R62, R9 ; F2F.F32.F64 R43, R62 ; F2F.F32.F64 R44, R10 ;
    """
    special = np.array([0x7F800001, 0xFF800123, 0x7FC00001, 0x7F800000, 0x00000001, 0x80000000, 0x3F800000],
                       np.uint32)
    words = rng.integers(0, 2**32, (n, 3)).astype(np.uint32)
    words[:, 0] = special[np.arange(n) % special.size]
    return body, words, 5, {}, []


def half_conversions(bench, rng, n):
    """F2F between float32 and float16 or bfloat16, both ways (the engine's), from special values and random bits
    (NaNs with payloads, subnormals, ties among them), beside a half to float64 (the binder's)."""
    body = """
        F2F.F16.F32 R40, R8 ; F2F.BF16.F32 R41, R8 ; F2F.F16.F32 R42, R10 ; F2F.BF16.F32 R43, R10 ;
        F2F.F32.F16 R44, R40 ; F2F.F32.BF16 R45, R41 ; F2F.F32.F16 R46, R9 ; F2F.F32.BF16 R47, R9 ;
        F2F.F64.BF16 R48, R41 ;
    """
    words = np.concatenate([float32_words(rng, n, 1), rng.integers(0, 2**32, (n, 2))], axis=1)
    return body, words, 10, {}, []


def integer_arithmetic(bench, rng, n):
    """32- and 64-bit integer forms: negation, wide multiply-add, shifts past the width, signed and
    unsigned min, max and compares, absolute values, width conversions."""
    body = """
        IADD R40, -R8, R9 ; IMUL R41, R8, R9 ; IMAD R42, R8, 0x7, -R10 ;
        SHL R43, R8, R11 ; SHR.S32 R44, R8, R11 ; SHR.U32 R45, R9, R11 ;
        LOP.XOR R46, R8, 0xf0f0f0f0 ; IMNMX.MIN.S32 R47, R8, R9 ; IMNMX.MAX.U32 R48, R8, R9 ;
        IABS R49, R8 ;
        IMAD.WIDE R50, R8, R9, R10 ; IADD.64 R52, R50, -R8 ; IMUL.64 R54, R50, R8 ;
        IMAD.64 R56, R50, R8, R52 ; SHL.64 R58, R50, R11 ; SHR.S32.64 R60, R50, R11 ;
        SHR.U32.64 R62, R50, R11 ; LOP.OR.64 R64, R50, R56 ; IMNMX.MIN.S64 R66, R50, R56 ;
        IMNMX.MAX.U64 R68, R50, R56 ; IABS.64 R70, R50 ; I2I.S64.S32 R72, R8 ; I2I.S64.U32 R74, R8 ;
        I2I.S32.S64 R76, R50 ; I2F.F32.S64 R77, R50 ; I2F.F64.S64 R78, R56 ;
        ISETP.LT.S64.AND P0, R50, R56, PT ; ISETP.GE.U64.OR P1, R50, R56, P0 ; SEL R80, R8, R9, P1 ;
        ISETP.LE.S32.AND P2, R8, R9, PT ; @P2 IADD R81, R8, 0x1 ; @!P2 MOV R81, R9 ;
    """
    words = rng.integers(0, 2**32, (n, 4)).astype(np.uint32)
    words[:, 3] = rng.integers(0, 70, n)             # shift counts, some past the width
    words[::7, 0] = 0x80000000                       # the most negative int32
    return body, words, 42, {}, []


def global_memory(bench, rng, n):
    """Byte, halfword, word and 64/128-bit loads and stores, guarded, to VRAM and host memory, a
    scatter whose lanes collide, a load whose lanes read two buffers (pages that are not one run), and
    loads of consecutive elements starting inside a sector (neighbouring warps share one)."""
    table = bench.buffer(rng.integers(0, 2**32, 4096).astype(np.uint32))
    host = bench.buffer(np.zeros(1024, np.uint32), system=True)
    out = bench.buffer(np.zeros(4096, np.uint32))
    body = f"""
        MOV R60, {table & 0xFFFFFFFF:#x} ; MOV R61, {table >> 32:#x} ;
        MOV R62, {host & 0xFFFFFFFF:#x} ; MOV R63, {host >> 32:#x} ;
        MOV R64, {out & 0xFFFFFFFF:#x} ; MOV R65, {out >> 32:#x} ;
        LOP.AND R66, R8, 0xff0 ; IMAD.WIDE R68, R66, 0x4, R60 ;
        LDG.E R40, [R68.64] ; LDG.E.U8 R41, [R68.64+0x3] ; LDG.E.S16 R42, [R68.64+0x2] ;
        LDG.E.64 R44, [R68.64+0x8] ; LDG.E.128 R48, [R68.64+0x10] ;
        LOP.AND R70, R9, 0xff ; IMAD.WIDE R72, R70, 0x4, R62 ;
        ISETP.LT.U32.AND P0, R70, 0x80, PT ;
        @P0 STG.E [R72.64], R8 ; @!P0 STG.E.U16 [R72.64+0x2], R9 ; MEMBAR.GPU ;
        LDG.E R43, [R72.64] ;
        LOP.AND R74, R8, 0x3f ; IMAD.WIDE R76, R74, 0x8, R64 ;
        STG.E.64 [R76.64], R8 ; STG.E.U8 [R76.64+0x1], R9 ;
        SEL R80, R60, R64, P0 ; SEL R81, R61, R65, P0 ; LDG.E R52, [R80.64+0x40] ;
        IMAD.WIDE R82, R0, 0x4, R60 ; LDG.E R53, [R82.64+0xc] ; IMAD.WIDE R84, R0, 0x8, R60 ;
        LDG.E.64 R54, [R84.64+0x8] ;
    """
    return body, rng.integers(0, 2**32, (n, 2)), 16, {}, [(out, np.zeros(4096, np.uint32)),
                                                          (host, np.zeros(1024, np.uint32))]


def global_adds(bench, rng, n):
    """The 32-bit atomic adds the engine runs: float32 and integer, each lane's old value kept, lanes colliding
    on eight words in an order that matters to float sums (values from 1e-3 to 1e20, an infinity), guarded, and
    to host memory."""
    target = bench.buffer(rng.standard_normal(16).astype(np.float32).view(np.uint32))
    host = bench.buffer(np.zeros(8, np.uint32), system=True)
    body = f"""
        MOV R60, {target & 0xFFFFFFFF:#x} ; MOV R61, {target >> 32:#x} ;
        MOV R62, {host & 0xFFFFFFFF:#x} ; MOV R63, {host >> 32:#x} ;
        LOP.AND R66, R9, 0x7 ; IMAD.WIDE R68, R66, 0x4, R60 ; IMAD.WIDE R70, R66, 0x4, R62 ;
        ATOMG.ADD.F32 R40, [R68.64], R8 ;
        ATOMG.ADD.S32 R41, [R68.64+0x20], R9 ;
        ISETP.LT.U32.AND P0, R66, 0x3, PT ;
        @P0 ATOMG.ADD.U32 R42, [R70.64], R9 ;
        @!P0 ATOMG.ADD.F32 RZ, [R70.64+0x10], R8 ;
    """
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 21, n)).astype(np.float32)
    x[rng.integers(0, n)] = np.inf
    inputs = np.stack([x.view(np.uint32), rng.integers(0, 2**32, n).astype(np.uint32)], axis=1)
    return body, inputs, 3, {}, [(target, np.zeros(16, np.uint32)), (host, np.zeros(8, np.uint32))]


@pytest.mark.parametrize("split", [False, True])
def test_loads_spread_over_hundreds_of_pages_read_their_words(split, monkeypatch):
    """Batches of 2,048 lanes, each 256 bytes from the last, loading from a 4 MiB buffer (a span of 128 pages,
    and past the 2 MiB of pages one last-level page table maps), in one run of physical pages or (`split`) with
    its halves' pages swapped: every lane reads its own word, and the translated code counts as the reference."""
    lanes, half = np.arange(1 << 13), 1 << 21
    words = np.random.default_rng(2).integers(0, 2**32, 1 << 20).astype(np.uint32)
    results = []
    for sim in ("translated", "reference"):
        monkeypatch.setenv("LAPIS_SIM", sim)
        bench = Bench("teaching")
        table = bench.buffer(np.zeros_like(words) if split else words)
        if split:                                   # mapped again: the second half's pages first
            second, first = bench.vram.alloc(half), bench.vram.alloc(half)
            bench.space.map(table, first, half, PTE_WRITABLE)
            bench.space.map(table + half, second, half, PTE_WRITABLE)
            bench.gpu.vram.write(first, words[:half // 4].tobytes())
            bench.gpu.vram.write(second, words[half // 4:].tobytes())
        body = f"""MOV R60, {table & 0xFFFFFFFF:#x} ; MOV R61, {table >> 32:#x} ; IMAD.WIDE R68, R0, 0x100, R60 ;
            LDG.E R40, [R68.64] ; LDG.E R41, [R68.64+0x1f0000] ;"""
        out = bench.lanes(body, np.zeros((lanes.size, 1)), 2, block=256)
        assert np.array_equal(out[:, 0], words[lanes * 64]) and np.array_equal(out[:, 1], words[lanes * 64 + 0x7c000])
        results.append(bench.gpu.simt.counters)
    assert results[0] == results[1]


CASES = [simt.divergence, simt.rotated_loop, simt.shared_memory, simt.atomics, simt.warp_operations, simt.matrix_unit,
         simt.local_memory, float32_arithmetic, float64_arithmetic, half_conversions, integer_arithmetic, global_memory,
         global_adds]


def _run(case, profile: str, sim: str, monkeypatch) -> list:
    """The outputs, buffers, counters and modelled times of two launches of a case with LAPIS_SIM=`sim`."""
    monkeypatch.setenv("LAPIS_SIM", sim)
    return _run_twice(case, profile)[1]


@pytest.mark.parametrize("profile", ["teaching", "mi300x"])
@pytest.mark.parametrize("case", CASES)
def test_translated_code_gives_the_reference_results_counters_and_times(case, profile, monkeypatch):
    translated = _run(case, profile, "translated", monkeypatch)
    reference = _run(case, profile, "reference", monkeypatch)
    for (out, buffers, counters, ns), (out0, buffers0, counters0, ns0) in zip(translated, reference, strict=True):
        assert out.shape == out0.shape and np.array_equal(out, out0), np.argwhere(out != out0)[:5]
        assert all(np.array_equal(a, b) for a, b in zip(buffers, buffers0, strict=True))
        assert counters == counters0
        assert ns == ns0


def test_the_cases_cover_every_operation_the_engine_has():
    """Each operation of the engine's table is translated from some instruction of the cases above."""
    bench = Bench("teaching")
    used = set()
    for case in CASES:
        body = case(bench, np.random.default_rng(0), 64)[0]
        program = assemble(body.replace(" ; ", " ;\n") + "\nEXIT ;")
        used |= {OPS[k] for k in translate(program, 96).table[:, 0]}
    assert used >= set(OPS) - {"LDC", "LDC64", "S2R"}           # those three are in every kernel's prologue


@numba.njit
def _half_values(bits, bf16, out):
    for i in range(bits.size):
        out[i] = half_value(bits[i], bf16)


@pytest.mark.parametrize("kind", ["F16", "BF16"])
def test_the_engine_reads_every_16_bit_pattern_as_the_reference(kind):
    """The halves HMMA's fragments hold, as the engine reads them (`half_value`, without branches) and as the
    reference does (`numerics.half_to_f64`), for all 65,536 patterns with other bits above them: the same value
    and sign, NaN for NaN."""
    bits = np.arange(1 << 16, dtype=np.int64)
    got = np.zeros(bits.size)
    _half_values(bits | (0x5A5A << 16), kind == "BF16", got)
    with np.errstate(invalid="ignore"):
        want = half_to_f64(bits.astype(np.uint32), kind)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan], want[~nan]) and np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))


@numba.njit
def _rounded_halves(values, out16, outbf):
    for i in range(values.size):
        out16[i], outbf[i] = f64_to_f16_bits(np.float64(values[i])), f32_to_bf16_bits(np.float64(values[i]))


@numba.njit
def _widened_halves(bits, out16, outbf):
    for i in range(bits.size):
        out16[i], outbf[i] = half_to_f32_bits(bits[i], False), half_to_f32_bits(bits[i], True)


def test_the_engine_rounds_float32_to_halves_as_the_reference():
    """F2F.F16.F32 and F2F.BF16.F32 as the engine rounds (`f64_to_f16_bits`, `f32_to_bf16_bits`) and as the
    reference does (`numerics.f64_to_half`): every pattern of the top 16 bits (every sign, exponent and NaN
    class) under low bits that are zero, ties, just past ties and random, bit for bit."""
    lows = np.array([0, 1, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    bits = (np.arange(1 << 16, dtype=np.uint32)[:, None] << np.uint32(16) | lows).ravel()
    bits = np.concatenate([bits, np.random.default_rng(0).integers(0, 2**32, 1 << 18, dtype=np.uint32)])
    values = bits.view(np.float32)
    got16, gotbf = np.zeros(bits.size, np.int64), np.zeros(bits.size, np.int64)
    _rounded_halves(values, got16, gotbf)
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.array_equal(got16, f64_to_half(values.astype(np.float64), "F16"))
        assert np.array_equal(gotbf, f64_to_half(values.astype(np.float64), "BF16"))


def test_the_engine_widens_every_half_to_float32_as_the_reference():
    """F2F.F32.F16 and F2F.F32.BF16 of all 65,536 patterns (with other bits above them), as the engine converts
    (`half_to_f32_bits`) and as the reference does: bit for bit, a signalling NaN made quiet with its payload."""
    bits = np.arange(1 << 16, dtype=np.int64)
    got16, gotbf = np.zeros(bits.size, np.int64), np.zeros(bits.size, np.int64)
    _widened_halves(bits | (0x5A5A << 16), got16, gotbf)
    with np.errstate(invalid="ignore"):
        for got, kind in ((got16, "F16"), (gotbf, "BF16")):
            assert np.array_equal(got, float_to_format(half_to_f64(bits.astype(np.uint32), kind), "F32"))


def test_make_compiles_the_engine_with_the_arguments_a_launch_passes():
    """`make` runs compile_engine once on made-up arguments: their types must be a real launch's (the engine's
    machine code is cached by them), or a fresh install fails to build."""
    from lapis.hardware.simt.native_scheduler import compile_engine, execute_batch
    compile_engine()
    compiled = set(execute_batch.signatures)
    Bench("teaching").run("IADD R1, R0, 0x1 ;\nEXIT ;")
    assert set(execute_batch.signatures) == compiled          # the launch found its code compiled


@pytest.fixture(params=[1, 2], ids=["one thread", "two threads"])
def engine_threads(request, monkeypatch):
    """The engine on one thread, or with every fused run and loop over two parts of 64 lanes or more split between
    two threads (`native_scheduler.run_parts`)."""
    monkeypatch.setattr(NativeRunner, "threads", request.param)
    monkeypatch.setattr(NativeRunner, "parted_work", 0)
    return request.param


def test_the_engine_threads_follow_the_setting_and_a_forked_child_runs_on_one():
    """LAPIS_SIM_THREADS caps the threads (never below one); a child forked after the split runs on one thread,
    and the docs quote the split's thresholds."""
    for wanted, expected in (("1", 1), ("0", 1), ("2", min(2, numba.config.NUMBA_NUM_THREADS))):
        env = dict(os.environ, LAPIS_SIM_THREADS=wanted)
        out = subprocess.run([sys.executable, "-c", "from lapis.hardware.simt.translated import NativeRunner; "
                              "print(NativeRunner.threads)"], env=env, capture_output=True, text=True, check=True)
        assert int(out.stdout) == expected
    pid = os.fork()
    if pid == 0:
        os._exit(0 if NativeRunner.threads == 1 else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    docs = (Path(__file__).resolve().parent.parent / "docs" / "layer0-hardware.md").read_text()
    assert f"{NativeRunner.parted_work:,} instructions over lanes" in docs and f"of {PART_ALIGN} lanes" in docs


def uniform_loop(bench, rng, n):
    """A loop every lane runs 16 times: its body, the branch back and the compare run as one fused chain, which
    counts the lanes its exit branch (on a negated predicate) takes."""
    body = """
        MOV R40, 0x0 ; MOV R41, 0x0 ; I2F.F32.U32 R42, R8 ;
    top:
        ISETP.LT.S32.AND P0, R41, 0x10, PT ;
        @!P0 BRA done ;
        FFMA R42, R42, 0.5, R42 ; IADD R40, R40, R8 ; IADD R41, R41, 0x1 ;
        BRA top ;
    done:
    """
    return body, rng.integers(0, 2**32, (n, 1)), 3, {}, []


@pytest.mark.parametrize("case", [simt.divergence, simt.rotated_loop, uniform_loop, float32_arithmetic,
                                  float64_arithmetic, float_round_trips, integer_arithmetic])
def test_fused_runs_give_the_reference_results_and_counters(case, monkeypatch, engine_threads):
    """Every run of arithmetic compiled into one LLVM function (`fused.py`, LAPIS_FUSE_AFTER=0) against the
    reference: blocks of 33 lanes, so that the last vector of 16 lanes runs into the rows' padding; divergent
    groups run the masked loops, a group alone a loop's chain; the first launch runs unfused, the second fused."""
    runs = []
    monkeypatch.setattr(scheduler, "fuse_hot", lambda *args: runs.append(fuse_hot(*args)))
    results = []
    for sim, after in (("translated", "0"), ("reference", "never")):
        monkeypatch.setenv("LAPIS_SIM", sim)
        monkeypatch.setenv("LAPIS_FUSE_AFTER", after)
        bench = Bench("teaching")
        body, inputs, outputs, kw, _ = case(bench, np.random.default_rng(5), 33 * 20)
        launches = [bench.lanes(body, inputs, outputs, block=33, **kw) for _ in range(2)]
        results.append((launches, bench.gpu.simt.counters, bench.timing(bench.gpu.simt.counters).total_ns))
    assert sum(runs) > 0
    (fused, counters, ns), (reference, counters0, ns0) = results
    for out, out0 in zip(fused, reference, strict=True):
        assert out.shape == out0.shape and np.array_equal(out, out0), np.argwhere(out != out0)[:5]
    assert counters == counters0 and ns == ns0


def test_conversions_between_float32_and_float64_are_fused_into_runs():
    """F2F between float32 and float64 (four and one in each float32 division's refinement) is in the runs it sits in,
    so the division is one run; the forms the engine's LLVM and numpy treat apart (float32 to float32, halves) end
    runs."""
    program = assemble("""
        MUFU.RCP R11, R10 ; F2F.F64.F32 R14, R9 ; F2F.F64.F32 R16, R11 ; DMUL R18, R14, R16 ;
        DFMA R20, -R14, R18, R14 ; F2F.F32.F64 R12, R20 ; FADD R13, R12, R9 ;
        F2F.F32.F32 R22, R13 ; FADD R23, R22, R9 ; F2F.F16.F32 R24, R23 ; FADD R25, R24, R9 ;
        EXIT ;""".replace(" ; ", " ;\n"))
    table = translate(program, 96).table
    assert fused.runs(table).tolist() == [[0, 7], [8, 1], [10, 1]]


def _fused_table(bench) -> np.ndarray:
    """The table of the program the bench ran last, as fused for its launches (one row length)."""
    (translation,) = bench.gpu.simt.caches.translations(bench.last[0])
    return translation.table


# Loads of shared memory inside a run of arithmetic, each through a register the run does not write: lane l's
# four words from word 4l on (consecutive, and again 16 words on: counted once), a pair of words per lane
# (consecutive), the same word for every lane (a broadcast), lanes eight words apart (a 4-way bank conflict,
# gathered); the last ones only where R8 is even (a divergent group runs the run under its mask).
SHARED_LOADS = """
    S2R R60, SR_TID.X ; SHL R61, R60, 0x2 ;
    STS [R61], R8 ; STS [R61+0x100], R9 ; STS [R61+0x200], R8 ;
    BAR.SYNC 0x0 ;
    SHL R62, R60, 0x4 ; SHL R63, R60, 0x3 ; LOP.AND R64, R60, 0x7 ; SHL R64, R64, 0x5 ; MOV R65, 0x40 ;
    LOP.AND R66, R8, 0x1 ; ISETP.EQ.U32.AND P1, R66, 0x0, PT ;
    LDS.128 R40, [R62] ; LDS.64 R44, [R63+0x100] ; LDS R46, [R65+0x4] ; LDS R47, [R61+0x200] ;
    FFMA R48, R40, R41, R42 ; IADD R49, R44, R46 ; IADD R50, R45, R47 ;
    LDS.64 R51, [R62+0x8] ; LDS.128 R68, [R62+0x40] ; IADD R48, R48, R70 ;
    @!P1 BRA skip ;
    LDS.128 R53, [R64] ; FADD R57, R53, R56 ; LDS R58, [R61+0x100] ; IADD R59, R58, R55 ;
skip:
"""


@pytest.mark.parametrize("block", [33, 64])
def test_fused_loads_of_shared_memory_give_the_reference_results_and_counters(block, monkeypatch, engine_threads):
    """Runs that load from shared memory, fused (blocks of 64 lanes: whole vectors of one block, whose loads
    are broadcasts or consecutive; of 33: vectors across blocks, gathered) against the reference."""
    results = []
    for sim, after in (("translated", "0"), ("reference", "never")):
        monkeypatch.setenv("LAPIS_SIM", sim)
        monkeypatch.setenv("LAPIS_FUSE_AFTER", after)
        bench = Bench("teaching")
        inputs = np.random.default_rng(block).integers(0, 2**32, (block * 8, 2))
        outs = [bench.lanes(SHARED_LOADS, inputs, 20, block=block, shared=0x800) for _ in range(2)]
        results.append((outs, bench.gpu.simt.counters, bench))
    (fused_outs, counters, bench), (reference_outs, counters0, _) = results
    table = _fused_table(bench)
    assert table[:, RUN_LOADS].tolist().count(0) == len(table) - 2 and table[:, RUN_LOADS].sum() == 8  # 8 in 2 runs
    for out, out0 in zip(fused_outs, reference_outs, strict=True):
        assert out.shape == out0.shape and np.array_equal(out, out0), np.argwhere(out != out0)[:5]
    assert counters == counters0
    assert counters.bank_conflicts > 0


# Shuffles inside runs of arithmetic: a butterfly sum, each mode by an immediate and by a register, sources past
# the warp (the lane's own value on 32-wide warps, another's on 64-wide), a divergent group (the masked loop) and
# a guarded shuffle, then a loop whose lanes leave it after one to four trips while the rest shuffle with their
# last values, and a warp sum whose offset halves in a register from 16 (a loop as a numba kernel writes it).
SHUFFLES = """
    I2F.F32.U32 R40, R8 ;
    SHFL.BFLY R41, R40, 0x10 ; FADD R40, R40, R41 ; SHFL.BFLY R41, R40, 0x8 ; FADD R40, R40, R41 ;
    SHFL.DOWN R42, R8, 0x3 ; IADD R43, R42, R8 ; SHFL.UP R44, R8, 0x5 ; SHFL.IDX R45, R8, 0x7 ;
    SHFL.IDX R46, R8, 0x27 ; SHFL.BFLY R47, R8, 0x21 ; SHFL.DOWN R48, R8, 0x30 ;
    LOP.AND R60, R8, 0x1 ; ISETP.EQ.U32.AND P1, R60, 0x0, PT ; MOV R49, 0x0 ; MOV R50, 0x0 ;
    @!P1 BRA skip ;
    SHFL.DOWN R61, R8, 0x1 ; IADD R49, R61, 0x1 ; LOP.AND R62, R9, 0x1 ; ISETP.EQ.U32.AND P3, R62, 0x0, PT ;
    @P3 SHFL.UP R50, R9, 0x2 ;
skip:
    MOV R51, R8 ; MOV R52, 0x0 ; LOP.AND R63, R9, 0x3 ;
top:
    SHFL.BFLY R53, R51, 0x1 ; IADD R51, R51, R53 ; IADD R52, R52, 0x1 ; ISETP.LE.U32.AND P2, R52, R63, PT ;
    @P2 BRA top ;
    LOP.AND R64, R9, 0x3f ; SHFL.IDX R54, R8, R64 ; SHFL.DOWN R55, R8, R64 ; SHFL.UP R56, R9, R64 ;
    SHFL.BFLY R57, R8, R64 ; I2F.F32.U32 R58, R9 ; MOV R65, 0x10 ;
halve:
    SHFL.DOWN R66, R58, R65 ; FADD R58, R58, R66 ; SHR.U32 R65, R65, 0x1 ; ISETP.NE.U32.AND P4, R65, 0x0, PT ;
    @P4 BRA halve ;
"""


@pytest.mark.parametrize("profile, block", [("teaching", 64), ("teaching", 48), ("mi300x", 128), ("mi300x", 96)])
def test_fused_shuffles_give_the_reference_results_and_counters(profile, block, monkeypatch, engine_threads):
    """Runs that shuffle, fused with a whole warp per vector (blocks of whole warps) or left to the engine (blocks
    that end in part of a warp), against the reference: values and every counter. Both loops are fused as
    loops."""
    results = []
    for sim, after in (("translated", "0"), ("reference", "never")):
        monkeypatch.setenv("LAPIS_SIM", sim)
        monkeypatch.setenv("LAPIS_FUSE_AFTER", after)
        bench = Bench(profile)
        inputs = np.random.default_rng(block).integers(0, 2**32, (block * 6, 2))
        outs = [bench.lanes(SHUFFLES, inputs, 19, block=block) for _ in range(2)]
        results.append((outs, bench.gpu.simt.counters, bench))
    (fused, counters, bench), (reference, counters0, _) = results
    for out, out0 in zip(fused, reference, strict=True):
        assert out.shape == out0.shape and np.array_equal(out, out0), np.argwhere(out != out0)[:5]
    assert counters == counters0
    table = _fused_table(bench)
    shuffling = table[:, RUN_WARP] != 0
    assert shuffling.any() and (table[shuffling, RUN_WARP] == bench.gpu.simt.warp_size).all()
    assert np.count_nonzero(table[:, LOOP_LEN]) == 2


@pytest.mark.parametrize("loads, bad", [
    ("LDS R42, [R61] ;", 64),                                   # word 64: past the block's 256 bytes
    ("LDS R42, [R61] ; LDS R44, [R61+0x40] ;", 50),             # the second, 16 words on, is past them
])
@pytest.mark.parametrize("sim, after", [("translated", "0"), ("reference", "never")])
def test_a_fused_load_that_would_fault_faults_where_the_reference_does(loads, bad, sim, after, monkeypatch):
    """The engine checks a fused run's loads before the run: when one lane's would fault, the run goes one
    instruction at a time, and the load faults as the reference's does: issued, with nothing after it."""
    monkeypatch.setenv("LAPIS_SIM", sim)
    monkeypatch.setenv("LAPIS_FUSE_AFTER", after)
    bench = Bench("teaching")
    body = f"SHL R61, R8, 0x2 ; IADD R40, R8, 0x1 ; FADD R41, R40, R40 ; {loads} IADD R43, R42, R40 ;"
    inputs = np.arange(64, dtype=np.uint32)[:, None] % 48
    bench.lanes(body, inputs, 5, shared=256)
    inputs[37] = bad
    with pytest.raises(KernelFault, match="shared memory access outside the block's 256 bytes") as fault:
        bench.lanes(body, inputs, 5, shared=256)
    if sim == "translated":
        assert _fused_table(bench)[:, RUN_LOADS].sum() == loads.count("LDS")
    pc = fault.value.pc // 16
    counted = bench.gpu.simt.counters.thread_instructions
    assert counted[:pc + 1].min() == 64 and counted[pc + 1:].sum() == 0     # issued up to the load, none after
    assert format_instruction(bench.last[0][pc], 0).startswith(loads.split(" ;")[-2].strip())


def test_launches_over_grids_of_other_sizes_each_run_their_own_fused_code(monkeypatch):
    """Fused runs are compiled for one register-file row length: a kernel launched over 8 blocks, then 1, then
    8 again keeps a translation for each length and runs fused code in both, with the reference's results."""
    body, inputs, outputs, kw, _ = float32_arithmetic(None, np.random.default_rng(4), 32 * 8)
    results = []
    for sim, after in (("translated", "0"), ("reference", "never")):
        monkeypatch.setenv("LAPIS_SIM", sim)
        monkeypatch.setenv("LAPIS_FUSE_AFTER", after)
        bench = Bench("teaching")
        results.append([bench.lanes(body, inputs[:n], outputs, block=32, **kw) for n in (256, 32, 256, 32)])
        if sim == "translated":
            tables = [t.table for t in bench.gpu.simt.caches.translations(bench.last[0])]
            assert len(tables) == 2 and all(np.count_nonzero(table[:, RUN_LEN]) for table in tables)
    for out, out0 in zip(*results, strict=True):
        assert np.array_equal(out, out0)


# A loop tested at its bottom whose trips each lane takes from its input (0 to 1,023, and 2^31 in the
# watchdog's test): its body and branch run as one fused loop to the end, lane vector by lane vector.
COUNTED_LOOP = """
    MOV R40, 0x0 ; MOV R41, 0x0 ; I2F.F32.U32 R42, R8 ;
again:
    IADD R40, R40, R8 ; FFMA R42, R42, 0.5, R42 ; IADD R41, R41, 0x1 ;
    ISETP.LT.U32.AND P0, R41, R8, PT ;
    @P0 BRA again ;
"""


def _fused_loops(bench) -> int:
    """How many fused loops the program the bench ran last has."""
    return int(np.count_nonzero(_fused_table(bench)[:, LOOP_LEN]))


def test_a_fused_loop_counts_every_trip_as_the_reference(monkeypatch, engine_threads):
    """Lanes leave the loop after different trips (in blocks of 33, so warps and vectors end part full):
    the fused loop gives the reference's registers and counters, and each warp issues a trip while any of
    its lanes is still in the loop."""
    inputs = np.random.default_rng(3).integers(1, 1024, (33 * 8, 1))
    inputs[::7] = 1
    results = []
    for sim, after in (("translated", "0"), ("reference", "never")):
        monkeypatch.setenv("LAPIS_SIM", sim)
        monkeypatch.setenv("LAPIS_FUSE_AFTER", after)
        bench = Bench("teaching")
        outs = [bench.lanes(COUNTED_LOOP, inputs, 3, block=33) for _ in range(2)]
        results.append((outs, bench.gpu.simt.counters, bench))
    (fused_outs, counters, bench), (reference_outs, counters0, _) = results
    assert _fused_loops(bench) == 1
    for out, out0 in zip(fused_outs, reference_outs, strict=True):
        assert np.array_equal(out, out0)
    assert np.array_equal(fused_outs[1][:, 1], inputs[:, 0])
    assert counters == counters0
    trips = inputs[:, 0]
    warps = [trips[b * 33:(b + 1) * 33] for b in range(8)]
    most = sum(int(w[:32].max()) + int(w[32:].max()) for w in warps)
    assert counters.thread_instructions.max() == trips.sum()
    assert counters.warp_instructions.max() == most


def test_the_watchdog_stops_a_fused_loop_where_it_stops_the_reference(monkeypatch):
    """A fused loop runs at most the trips the watchdog's budget leaves; the lanes still looping run on
    instruction by instruction, and the watchdog faults at the same instruction as the reference's."""
    faults = []
    for sim, after in (("translated", "0"), ("reference", "never")):
        monkeypatch.setenv("LAPIS_SIM", sim)
        monkeypatch.setenv("LAPIS_FUSE_AFTER", after)
        bench = Bench("teaching")
        inputs = np.full((64, 1), 5)
        bench.lanes(COUNTED_LOOP, inputs, 3, block=32)
        inputs[::3] = 2**31
        with pytest.raises(KernelFault, match="watchdog") as fault:
            bench.lanes(COUNTED_LOOP, inputs, 3, block=32, watchdog=10_007)
        faults.append((str(fault.value), fault.value.pc, bench.gpu.simt.counters))
        if sim == "translated":
            assert _fused_loops(bench) == 1
    assert faults[0] == faults[1]


def test_a_run_that_fails_to_compile_runs_unfused(monkeypatch):
    """Fusing is only for speed: when compiling fails, the launch warns and its runs stay with the engine."""
    monkeypatch.setenv("LAPIS_FUSE_AFTER", "0")

    def broken(*args):
        raise RuntimeError("no LLVM today")
    monkeypatch.setattr(fused, "fuse", broken)
    bench = Bench("teaching")
    body, inputs, outputs, kw, _ = uniform_loop(bench, np.random.default_rng(1), 64)
    with pytest.warns(RuntimeWarning, match="no LLVM today"):      # fusing at the launch's end
        first = bench.lanes(body, inputs, outputs, block=32, **kw)
    assert np.array_equal(bench.lanes(body, inputs, outputs, block=32, **kw), first)


FUSE_ONE_RUN = """
import sys
from lapis.isa import assemble
import lapis.hardware.simt.translate as tr
from lapis.hardware.simt.fused import fuse
table = tr.translate(assemble("FFMA R1, R1, 0.5, R2 ;\\nFADD R3, R1, R2 ;\\nEXIT ;"), 8).table
print(fuse(table, [(0, 2)], 304, 32), table[0, tr.RUN_FN] != 0)
"""


@pytest.mark.slow
def test_a_damaged_cached_object_is_compiled_again(tmp_path):
    """Fused code kept on disk is checked before LLVM loads it (an object file that is not one crashes the
    process): a damaged file is compiled again and replaced. Each step runs in a process of its own, since a
    process loads a module once."""
    env = dict(os.environ, LAPIS_CACHE_DIR=str(tmp_path))

    def fuse_in_a_new_process():
        done = subprocess.run([sys.executable, "-c", FUSE_ONE_RUN], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()

    assert fuse_in_a_new_process() == ["1", "True"]
    [kept] = (tmp_path / "fused").iterdir()
    good = kept.read_bytes()
    kept.write_bytes(b"not an object file" * 8)
    assert fuse_in_a_new_process() == ["1", "True"]
    assert kept.read_bytes() == good


FUSE_HOT_ONCE = """
import sys
import numpy as np
from lapis.isa import assemble
import lapis.hardware.simt.translate as tr
from lapis.hardware.simt.fused import fuse_hot
translation = tr.translate(assemble("FFMA R1, R1, 0.5, R2 ;\\nFADD R3, R1, R2 ;\\nEXIT ;"), 8)
print(fuse_hot(translation, np.full(3, 64), int(sys.argv[1]), 304, 32), translation.table[0, tr.RUN_FN] != 0)
"""


@pytest.mark.slow
def test_runs_compiled_by_an_earlier_process_are_fused_at_the_first_launch(tmp_path):
    """A run made hot and compiled in one process is on disk: the next process's first launch of the program
    loads it, however far from hot the run is there; a process with another cache compiles nothing."""
    def first_launch(cache, after: int) -> list[str]:
        env = dict(os.environ, LAPIS_CACHE_DIR=str(cache))
        done = subprocess.run([sys.executable, "-c", FUSE_HOT_ONCE, str(after)], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()

    assert first_launch(tmp_path / "a", 0) == ["1", "True"]
    assert first_launch(tmp_path / "a", 10**9) == ["1", "True"]
    assert first_launch(tmp_path / "b", 10**9) == ["0", "False"]


@pytest.mark.parametrize("sim", ["translated", "reference"])
@pytest.mark.parametrize("instruction, message", [
    ("LDG.E R40, [R60.64+0x1]", r"misaligned 4-byte access at address 0x7f0000000001"),
    ("LDG.E R40, [R60.64+0x100000]", r"address is not mapped \(read\) at address 0x7f0000100000"),
    ("STS [R0+0x400], R8", r"shared memory access outside the block's 256 bytes"),
    ("LDL R40, [R0-0x4]", r"local memory access outside the thread's 16 bytes"),
    ("STG.E [R60.64+0x1000], R8", r"address is not mapped \(write\) at address 0x7f0000001000"),
])
def test_a_faulting_instruction_reports_the_same_fault(sim, instruction, message, monkeypatch):
    monkeypatch.setenv("LAPIS_SIM", sim)
    bench = Bench("teaching")
    buffer = bench.buffer(np.zeros(64, np.uint32))
    body = f"MOV R60, {buffer & 0xFFFFFFFF:#x} ; MOV R61, {buffer >> 32:#x} ; IADD R40, R8, 0x1 ; {instruction} ;"
    with pytest.raises(KernelFault, match=message):
        bench.lanes(body, np.arange(64, dtype=np.uint32)[:, None], 1, shared=256, local=16)


@pytest.mark.parametrize("sim", ["translated", "reference"])
@pytest.mark.parametrize("instruction, message", [
    ("LDG.E R40, [R60.64]", r"address is not mapped \(read\) at address 0x17f0000000000"),
    ("STG.E [R60.64+0x40], R8", r"address is not mapped \(write\) at address 0x17f0000000040"),
    ("ATOMG.ADD.U32 R40, [R60.64], R8", r"address is not mapped \(write\) at address 0x17f0000000000"),
    ("IMAD.WIDE R60, R0, 0x10000, R60 ; STG.E [R60.64], R8",            # lanes 64 KiB apart: walked lane by lane
     r"address is not mapped \(write\) at address 0x17f0000000000"),
])
def test_an_address_past_48_bits_faults_and_does_not_alias_its_low_bits(sim, instruction, message, monkeypatch):
    """buffer + 2^48 once reached the buffer: the page walk dropped the bits above 47 (in both executors)."""
    monkeypatch.setenv("LAPIS_SIM", sim)
    bench = Bench("teaching")
    buffer = bench.buffer(np.zeros(64, np.uint32))
    far = buffer + 2**48
    body = f"MOV R60, {far & 0xFFFFFFFF:#x} ; MOV R61, {far >> 32:#x} ; {instruction} ;"
    with pytest.raises(KernelFault, match=message):
        bench.lanes(body, np.arange(64, dtype=np.uint32)[:, None], 1)
    assert not bench.read(buffer, np.zeros(64, np.uint32)).any()


@pytest.mark.parametrize("sim", ["translated", "reference"])
def test_a_launch_after_a_fault_counts_only_itself(sim, monkeypatch):
    """A batch kept from a launch that faulted half-way carries nothing over into the next launch."""
    monkeypatch.setenv("LAPIS_SIM", sim)
    bench = Bench("teaching")
    buffer = bench.buffer(np.zeros(64, np.uint32))
    program = assemble("""
        S2R R0, SR_TID.X ; LDC.64 R2, c[0x0][0x160] ; LDC R4, c[0x0][0x168] ;
        IMAD R5, R0, R4, RZ ; IMAD.WIDE R6, R5, 0x4, R2 ;
        STG.E [R6.64], R0 ;
        EXIT ;""".replace(" ; ", " ;\n"))
    with pytest.raises(KernelFault, match="address is not mapped"):
        bench.run(program, block=(64, 1, 1), args=pointers(buffer) + (4096).to_bytes(4, "little"))
    counters = bench.run(program, block=(64, 1, 1), args=pointers(buffer) + (1).to_bytes(4, "little"))
    assert counters.warp_instructions.tolist() == [2] * len(program)          # 64 lanes: two warps of 32, once each
    assert counters.thread_instructions.tolist() == [64] * len(program)
    assert np.array_equal(bench.read(buffer, np.zeros(64, np.uint32)), np.arange(64, dtype=np.uint32))


@pytest.mark.slow
def test_the_kernel_tests_pass_with_every_dispatch_run_both_ways():
    """LAPIS_SIM=compare runs each dispatch with the reference, then translated from the same memory,
    and fails the dispatch on any difference (`compare.py`): the kernel, library and framework-op tests
    this way (but for COMPARE_SKIPS; `compare_run.py` says how it overlaps the suite), and `make test-compare`
    does it for every test."""
    run = compare_run.started or compare_run.CompareRun()
    code, output = run.result()
    assert code == 0, output
    for case in compare_run.COMPARE_SKIPS:          # a renamed test would leave its skip doing nothing
        path, name = case.split("::")
        assert f"def {name.split('[')[0]}(" in (compare_run.ROOT / path).read_text(), f"{case} no longer exists"


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([32, 64]), st.sampled_from([1, 2, 4]), st.integers(1, 3),
       st.sampled_from(["consecutive", "broadcast", "padded", "random"]), st.integers(0, 2**32 - 1))
def test_the_engine_counts_bank_conflicts_as_the_reference(warp_size, words_per_lane, warps, pattern, seed):
    """native_counters.wavefronts (its one-pass cases included) against caches.shared_wavefronts, and for the
    same words shifted by one offset."""
    rng = np.random.default_rng(seed)
    n = warps * warp_size
    laid = {"consecutive": np.arange(n) * words_per_lane,
            "broadcast": np.repeat(rng.integers(0, 100, warps), warp_size),
            "padded": np.arange(n) % 32 * 33 * words_per_lane,
            "random": rng.integers(0, 64, n)}[pattern].astype(np.int64)
    if seed % 3 == 0:
        laid[rng.random(n) < 0.3] = -1                    # lanes that do not access
    tally = np.zeros(TALLY_SLOTS, np.int64)
    counted = tuple(wavefronts(laid.copy(), warp_size, words_per_lane, tally))
    assert counted == shared_wavefronts(laid.reshape(warps, warp_size), words_per_lane)
    # the same lanes' words one offset further count alike (`native_scheduler.check_loads` counts them once)
    shifted = np.where(laid >= 0, laid + int(rng.integers(1, 1000)), -1)
    assert tuple(wavefronts(shifted, warp_size, words_per_lane, tally)) == counted


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([32, 64]), st.sampled_from([32, 48, 64, 96]), st.integers(1, 4), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_a_masked_shared_access_counts_every_block(warp_size, threads_per_block, nblocks, alike, seed):
    """native_counters.count_shared with some lanes inactive (a divergent access) counts each active lane's
    word, as the bank model over every warp does: where all blocks lay out the same words it counts the
    first block times the blocks, which must come to the same; where one block differs, every warp."""
    rng = np.random.default_rng(seed)
    warps_per_block = -(-threads_per_block // warp_size)
    per_block = warps_per_block * warp_size
    thread = np.tile(np.arange(threads_per_block), nblocks)
    padded_lane = (np.repeat(np.arange(nblocks), threads_per_block) * per_block + thread).astype(np.int64)
    words = rng.integers(0, 96, threads_per_block)
    word = np.tile(words, nblocks)
    active = np.tile(rng.random(threads_per_block) < 0.6, nblocks)
    if not alike:                                   # one block reads other words, or other lanes of it read
        block = int(rng.integers(nblocks))
        lanes = slice(block * threads_per_block, (block + 1) * threads_per_block)
        if rng.random() < 0.5:
            word[lanes] = rng.integers(0, 96, threads_per_block)
        else:
            active[lanes] = rng.random(threads_per_block) < 0.6
    active[0] = False                               # never the whole batch: the masked path
    laid, tally = np.empty(nblocks * per_block, np.int64), np.zeros(TALLY_SLOTS, np.int64)
    count_shared(active, False, word * 4, padded_lane, threads_per_block, warps_per_block, warp_size, nblocks,
                 4, False, laid, tally)
    every = np.full(nblocks * per_block, -1, np.int64)
    every[padded_lane[active]] = word[active]
    assert (tally[SHARED_WAVEFRONTS], tally[SHARED_IDEAL_WAVEFRONTS]) == shared_wavefronts(
        every.reshape(-1, warp_size), 1)
    assert tally[SHARED_BYTES] == 4 * np.count_nonzero(active)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([32, 64]), st.integers(1, 4), st.sampled_from(["consecutive", "warp rows", "transposed", "near",
                                                                      "far", "warps shuffled"]),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_the_engine_finds_each_warps_sectors_in_order(warp_size, warps, pattern, masked, seed):
    """native_counters.lane_sectors (its insertion-sort and heapsort ways) and, for every lane of packed warps,
    run_sectors (where each warp reads consecutive words) against numpy: each warp's distinct 32-byte sectors, in
    (warp, sector) order, as the caches see them."""
    rng = np.random.default_rng(seed)
    n = warps * warp_size
    lane = np.arange(n)
    stride = int(rng.integers(1, 3000))
    byte = {"consecutive": lane * 4,
            "warp rows": (lane % warp_size + lane // warp_size * stride) * 4,    # a warp per row of a tile
            "transposed": (lane % 8 * stride + lane // 8) * 4,      # a tile's column, as a gemm stages B
            "near": rng.integers(0, 8192, n) // 4 * 4,
            "far": rng.integers(0, 1 << 24, n) // 4 * 4,
            "warps shuffled": rng.integers(0, 4096, n) // 4 * 4}[pattern]
    pa = (byte + int(rng.integers(0, 1 << 30)) // 4 * 4).astype(np.int64)
    padded_lane = lane.astype(np.int64)
    if pattern == "warps shuffled":                  # lanes of one warp apart: not warp by warp
        padded_lane = rng.permutation(n).astype(np.int64)
    active = rng.random(n) < 0.7 if masked else np.ones(n, bool)
    keys = np.zeros(n, np.int64)
    lanes, touched = lane_sectors(active, not masked, pa, padded_lane, warp_size, keys)
    expected = np.unique((padded_lane[active] // warp_size << 40) | (pa[active] >> 5))
    assert lanes == np.count_nonzero(active)
    assert keys[:touched].tolist() == expected.tolist()
    if not masked and pattern != "warps shuffled":
        keys[:] = -1
        touched = run_sectors(pa, n, warp_size, 4, keys)
        if pattern in ("consecutive", "warp rows"):
            assert keys[:touched].tolist() == expected.tolist()
        else:
            assert touched == -1
