"""Layer 0: every family of the ISA executed on the SIMT core and checked against numpy."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import pointers
from lapis import isa
from lapis.hardware.simt import KernelFault

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(7)


def f32_bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def half_bits(values, kind):
    dt = np.float16 if kind == "F16" else BF16
    return np.asarray(values, np.float32).astype(dt).view(np.uint16).astype(np.uint32)


def halves(bits, kind):
    dt = np.float16 if kind == "F16" else BF16
    return (np.asarray(bits, np.uint32) & 0xFFFF).astype(np.uint16).view(dt).astype(np.float32)


def test_integer_abs_and_float_operand_modifiers(bench):
    a = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    ints = rng.integers(-2**31, 2**31 - 1, 64).astype(np.int32)
    inputs = np.stack([f32_bits(a), f32_bits(b), ints.view(np.uint32)], axis=1)
    out = bench.lanes("""
        FADD R40, |R8|, -|R9| ;
        FFMA R41, -|R8|, R9, -R9 ;
        FMNMX.MAX R42, |R8|, -R9 ;
        IABS R43, R10 ;
    """, inputs, 4)
    assert np.array_equal(out[:, 0].view(np.float32), np.abs(a) - np.abs(b))
    assert np.allclose(out[:, 1].view(np.float32), -np.abs(a) * b - b, rtol=1e-6)
    assert np.array_equal(out[:, 2].view(np.float32), np.maximum(np.abs(a), -b))
    assert np.array_equal(out[:, 3].view(np.int32), np.abs(ints))


def test_float64_min_max_and_abs(bench):
    a, b = rng.standard_normal(32), rng.standard_normal(32)
    inputs = np.concatenate([a.view(np.uint32).reshape(32, 2), b.view(np.uint32).reshape(32, 2)], axis=1)
    out = bench.lanes("DMNMX.MIN R40, R8, R10 ; DADD R42, |R8|, -|R10| ;", inputs, 4)
    assert np.array_equal(out[:, :2].copy().view(np.float64).ravel(), np.minimum(a, b))
    assert np.array_equal(out[:, 2:].copy().view(np.float64).ravel(), np.abs(a) - np.abs(b))


@pytest.mark.parametrize("kind", ["F16", "BF16"])
def test_packed_half_arithmetic_rounds_like_the_format(bench, kind):
    n = 64
    x = rng.standard_normal((3, n, 2)).astype(np.float32) * 4
    packed = [half_bits(v[:, 0], kind) | half_bits(v[:, 1], kind) << 16 for v in x]
    out = bench.lanes(f"""
        HADD2.{kind} R40, R8, R9 ;
        HMUL2.{kind} R41, R8, -R9 ;
        HFMA2.{kind} R42, R8, R9, R10 ;
        HMNMX2.MIN.{kind} R43, R8, R9 ;
    """, np.stack(packed, axis=1), 4)
    dt = np.float16 if kind == "F16" else BF16
    a, b, c = (halves(np.stack([p & 0xFFFF, p >> 16], axis=1), kind).astype(np.float64) for p in packed)

    def got(col):
        return np.stack([halves(out[:, col], kind), halves(out[:, col] >> 16, kind)], axis=1)
    assert np.array_equal(got(0), (a + b).astype(dt).astype(np.float32))
    assert np.array_equal(got(1), (a * -b).astype(dt).astype(np.float32))
    assert np.array_equal(got(2), (a * b + c).astype(dt).astype(np.float32))
    assert np.array_equal(got(3), np.minimum(a, b).astype(np.float32))


def test_conversions_between_every_float_format_and_integers(bench):
    x = np.concatenate([rng.standard_normal(60) * 300, [0.5, 1.5, -2.5, 65504.0]]).astype(np.float32)
    inputs = np.stack([f32_bits(x), np.arange(64, dtype=np.uint32) * 37 - 1000], axis=1)
    out = bench.lanes("""
        F2F.F16.F32 R40, R8 ;
        F2F.BF16.F32 R41, R8 ;
        F2F.F32.F16 R42, R40 ;
        F2F.F64.BF16 R44, R41 ;
        F2F.BF16.F16 R46, R40 ;
        I2F.F16.S32 R47, R9 ;
        F2I.S32.BF16.RN R48, R41 ;
        F2I.U32.F32.TRUNC R49, R8 ;
    """, inputs, 10)
    as16 = x.astype(np.float16)
    asbf = x.astype(BF16)
    assert np.array_equal(out[:, 0], as16.view(np.uint16))
    assert np.array_equal(out[:, 1], asbf.view(np.uint16))
    assert np.array_equal(out[:, 2].view(np.float32), as16.astype(np.float32))
    assert np.array_equal(out[:, 4:6].copy().view(np.float64).ravel(), asbf.astype(np.float64))
    assert np.array_equal(out[:, 6], as16.astype(np.float32).astype(BF16).view(np.uint16))
    assert np.array_equal(out[:, 7], inputs[:, 1].view(np.int32).astype(np.float16).view(np.uint16))
    assert np.array_equal(out[:, 8].view(np.int32), np.rint(asbf.astype(np.float64)).astype(np.int32))
    assert np.array_equal(out[:, 9], np.clip(np.trunc(x), 0, None).astype(np.uint32))


def test_sub_word_and_wide_shared_memory_accesses(bench):
    # Each lane stores its id as a byte and a halfword, then reads neighbours' bytes back signed.
    values = (np.arange(32, dtype=np.int32) * 9 - 100).view(np.uint32).reshape(32, 1)
    out = bench.lanes("""
        S2R R60, SR_TID.X ;
        STS.U8 [R60], R8 ;
        SHL R61, R60, 0x1 ;
        STS.U16 [R61+0x40], R8 ;
        BAR.SYNC 0x0 ;
        LOP.XOR R62, R60, 0x1 ;
        LDS.S8 R40, [R62] ;
        SHL R63, R62, 0x1 ;
        LDS.U16 R41, [R63+0x40] ;
        SHL R64, R60, 0x3 ;
        STS.64 [R64+0x80], R8 ;
        LDS.64 R42, [R64+0x80] ;
    """, values, 4, shared=0x200)
    v = values.ravel().view(np.int32)
    partner = np.arange(32) ^ 1
    assert np.array_equal(out[:, 0].view(np.int32), v[partner].astype(np.int8).astype(np.int32))
    assert np.array_equal(out[:, 1], v[partner].view(np.uint32) & 0xFFFF)
    assert np.array_equal(out[:, 2], values.ravel())


def test_local_memory_is_private_per_thread_and_bounds_checked(bench):
    ids = np.arange(64, dtype=np.uint32).reshape(64, 1)
    out = bench.lanes("""
        STL [0x0], R8 ;
        IADD R60, R8, 0x100 ;
        STL [0xc], R60 ;
        LDL R40, [0x0] ;
        MOV R61, 0xc ;
        LDL R41, [R61] ;
        STL.U8 [0x11], R8 ;
        LDL R42, [0x10] ;
    """, ids, 3, local=32)
    assert np.array_equal(out[:, 0], ids.ravel())
    assert np.array_equal(out[:, 1], ids.ravel() + 0x100)
    assert np.array_equal(out[:, 2], ids.ravel() << 8)
    with pytest.raises(KernelFault, match=r"local memory access outside the thread's 32 bytes at address 0x20"):
        bench.lanes("LDL R40, [0x20] ;", ids, 1, local=32)


def test_global_atomics_serialise_lanes_on_one_address(bench):
    counter = bench.buffer(np.zeros(4, np.uint32))
    vals = np.array([np.arange(64)], np.uint32).T
    out = bench.lanes(f"""
        MOV R60, {counter & 0xFFFFFFFF:#x} ;
        MOV R61, {counter >> 32:#x} ;
        MOV R62, 0x1 ;
        ATOMG.ADD.U32 R40, [R60.64], R62 ;
        ATOMG.MAX.S32 R41, [R60.64+0x4], R8 ;
        ATOMG.EXCH.U32 R42, [R60.64+0x8], R8 ;
    """, vals, 3, block=64)
    assert sorted(out[:, 0]) == list(range(64))          # each lane saw a distinct count
    assert np.array_equal(out[:, 0], np.arange(64))       # lanes apply in lane order
    assert np.array_equal(out[:, 1], np.r_[0, np.arange(63)])
    assert np.array_equal(out[:, 2], np.r_[0, np.arange(63)])
    assert list(bench.read(counter, np.zeros(4, np.uint32))[:3]) == [64, 63, 63]


def test_float_and_64_bit_atomics_and_compare_and_swap(bench):
    n = 128
    target = bench.buffer(np.zeros(8, np.uint32))
    x = rng.standard_normal(n).astype(np.float32)
    inputs = np.stack([f32_bits(x), np.arange(n, dtype=np.uint32)], axis=1)
    bench.lanes(f"""
        MOV R60, {target & 0xFFFFFFFF:#x} ;
        MOV R61, {target >> 32:#x} ;
        ATOMG.ADD.F32 RZ, [R60.64], R8 ;
        MOV R62, 0xffffffff ;
        MOV R63, 0x1 ;
        ATOMG.ADD.U64 RZ, [R60.64+0x8], R62 ;
        MOV R64, 0x0 ;
        IADD R65, R9, 0x1 ;
        ATOMG.CAS.U32 R40, [R60.64+0x10], R64 ;
    """, inputs, 1, block=64)
    got = bench.read(target, np.zeros(8, np.uint32))
    assert got[:1].view(np.float32)[0] == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-5)
    assert got[2:4].copy().view(np.uint64)[0] == n * 0x1FFFFFFFF
    assert got[4] == 1                       # only the first lane found 0 and swapped in its id + 1


def test_shared_memory_atomics_build_a_histogram(bench):
    data = rng.integers(0, 16, 256).astype(np.uint32).reshape(256, 1)
    hist = bench.buffer(np.zeros(16, np.uint32))
    bench.lanes(f"""
        SHL R60, R8, 0x2 ;
        MOV R61, 0x1 ;
        ATOMS.ADD.U32 RZ, [R60], R61 ;
        BAR.SYNC 0x0 ;
        S2R R62, SR_TID.X ;
        ISETP.LT.U32.AND P0, R62, 0x10, PT ;
        @!P0 BRA done ;
        SHL R63, R62, 0x2 ;
        LDS R64, [R63] ;
        MOV R66, {hist & 0xFFFFFFFF:#x} ;
        MOV R67, {hist >> 32:#x} ;
        IMAD.WIDE R66, R62, 0x4, R66 ;
        ATOMG.ADD.U32 RZ, [R66.64], R64 ;
    done:
    """, data, 0, block=128, shared=64)
    assert np.array_equal(bench.read(hist, np.zeros(16, np.uint32)), np.bincount(data.ravel(), minlength=16))


@pytest.mark.parametrize("profile", ["h200", "mi300x"])
def test_shuffles_follow_the_warp_size(profile, request):
    bench = request.getfixturevalue("bench" if profile == "h200" else "bench64")
    ws = bench.gpu.profile.warp_size
    n = 2 * ws
    x = rng.integers(0, 1000, n).astype(np.uint32).reshape(n, 1)
    out = bench.lanes("""
        SHFL.DOWN R40, R8, 0x3 ;
        SHFL.UP R41, R8, 0x1 ;
        SHFL.BFLY R42, R8, 0x5 ;
        MOV R60, 0x2 ;
        SHFL.IDX R43, R8, R60 ;
    """, x, 4, block=n)
    v = x.ravel().reshape(-1, ws)
    lane = np.arange(ws)
    down = np.where(lane + 3 < ws, np.roll(v, -3, axis=1), v)
    up = np.where(lane >= 1, np.roll(v, 1, axis=1), v)
    assert np.array_equal(out[:, 0].reshape(-1, ws), down)
    assert np.array_equal(out[:, 1].reshape(-1, ws), up)
    assert np.array_equal(out[:, 2].reshape(-1, ws), v[:, lane ^ 5])
    assert np.array_equal(out[:, 3].reshape(-1, ws), np.repeat(v[:, 2:3], ws, axis=1))


def test_shuffle_reduction_sums_a_warp(bench):
    x = rng.integers(0, 100, 64).astype(np.uint32).reshape(64, 1)
    steps = (f"SHFL.BFLY R60, R40, {d:#x} ;\nIADD R40, R40, R60 ;\n" for d in (16, 8, 4, 2, 1))
    body = "MOV R40, R8 ;\n" + "".join(steps)
    out = bench.lanes(body, x, 1)
    assert np.array_equal(out.ravel(), np.repeat(x.reshape(2, 32).sum(axis=1), 32))


def test_votes_count_only_active_lanes(bench64):
    # Lanes with tid % 3 != 0 take the branch; there each votes on tid % 2.
    ws = 64
    x = np.arange(ws, dtype=np.uint32).reshape(ws, 1)
    out = bench64.lanes("""
        MOV R40, 0x0 ; MOV R41, 0x0 ; MOV R42, 0x0 ; MOV R43, 0x0 ;
        I2F.F32.U32 R60, R8 ;
        FMUL R60, R60, 0.33333334 ;
        F2I.S32.F32.FLOOR R60, R60 ;
        IMAD R60, R60, -0x3, R8 ;
        ISETP.EQ.U32.AND P0, R60, 0x0, PT ;
        @P0 BRA skip ;
        LOP.AND R61, R8, 0x1 ;
        ISETP.EQ.U32.AND P1, R61, 0x1, PT ;
        VOTE.ANY R40, P2, P1 ;
        VOTE.ALL R62, P3, P1 ;
        MOV R63, 0x1 ;
        SEL R42, R63, RZ, P2 ;
        SEL R43, R63, RZ, P3 ;
    skip:
    """, x, 4, block=ws)
    active = np.arange(ws) % 3 != 0
    votes = active & (np.arange(ws) % 2 == 1)
    ballot = int(sum(1 << i for i in range(ws) if votes[i]))
    assert np.array_equal(out[active, 0], np.full(active.sum(), ballot & 0xFFFFFFFF))
    assert np.array_equal(out[active, 1], np.full(active.sum(), ballot >> 32))     # wave64: a register pair
    assert (out[active, 2] == 1).all() and (out[active, 3] == 0).all()
    assert (out[~active] == 0).all()


def _mma_fragments(a, b, c):
    """Per-lane registers of PTX's mma.m16n8k16 layout (groupID = lane / 4, threadID_in_group = lane % 4)."""
    regs = np.zeros((32, 10), np.uint32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):           # a0..a7, two per register
            row, col = g + 8 * (i % 2), 2 * t + 8 * (i // 2)
            regs[lane, i] = a[row, col] | a[row, col + 1] << 16
        for j in range(2):
            k = 2 * t + 8 * j
            regs[lane, 4 + j] = b[k, g] | b[k + 1, g] << 16
        for i in range(4):
            regs[lane, 6 + i] = c[g + 8 * (i // 2), 2 * t + i % 2]
    return regs


@pytest.mark.parametrize("kind", ["F16", "BF16"])
def test_hmma_multiplies_16x16_by_16x8_per_32_lanes(bench64, kind):
    # On a 64-wide device each half of the wavefront is its own MMA group.
    mats = [(rng.standard_normal((16, 16)), rng.standard_normal((16, 8)), rng.standard_normal((16, 8)))
            for _ in range(2)]
    mats[1][0][3, 5], mats[1][1][5, 2] = np.inf, 0.0           # inf * 0: NaN, which comes out canonical
    mats[1][2][7, 1] = np.inf
    regs, expected = [], []
    for a, b, c in mats:
        ab, bb = half_bits(a, kind).reshape(16, 16), half_bits(b, kind).reshape(16, 8)
        c32 = c.astype(np.float32)
        regs.append(_mma_fragments(ab, bb, f32_bits(c32)))
        av, bv = halves(ab, kind), halves(bb, kind)
        want = np.zeros((16, 8), np.float32)
        for i in range(16):                  # Python floats: exact products, summed into C in k order
            for j in range(8):
                total = float(c32[i, j])
                for k in range(16):
                    total += float(av[i, k]) * float(bv[k, j])
                want[i, j] = np.float32(total)
        expected.append(want)
    out = bench64.lanes(f"HMMA.16816.{kind} R40, R8, R12, R14 ;", np.concatenate(regs), 4, block=64)
    for group, want in enumerate(expected):
        d = out[32 * group:32 * group + 32]
        got = np.zeros((16, 8), np.uint32)
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for i in range(4):
                got[g + 8 * (i // 2), 2 * t + i % 2] = d[lane, i]
        nan = np.isnan(want)
        assert np.array_equal(got[~nan], f32_bits(want)[~nan])
        assert nan.any() == (group == 1) and (got[nan] == 0x7FFFFFFF).all()


def test_hmma_under_divergence_faults(bench):
    src = """
        S2R R0, SR_TID.X ;
        ISETP.LT.U32.AND P0, R0, 0x8, PT ;
        @P0 EXIT ;
        HMMA.16816.F16 R8, R8, R12, R8 ;
        EXIT ;
    """
    with pytest.raises(KernelFault, match="HMMA with some lanes"):
        bench.run(src, block=(32, 1, 1))


def test_unit_and_warp_ids(teaching):
    ids = np.zeros((4 * 64, 1), np.uint32)
    out = teaching.lanes("S2R R40, SR_SMID ; S2R R41, SR_WARPID ;", ids, 2, block=64)
    block = np.arange(4 * 64) // 64
    assert np.array_equal(out[:, 0], block % 2)                 # the teaching GPU has two units
    assert np.array_equal(out[:, 1], np.arange(4 * 64) % 64 // 32)


def test_teaching_profile_is_small_and_round(teaching):
    p = teaching.gpu.profile
    assert (p.compute_units, p.max_threads_per_unit // p.warp_size, p.clock_ghz) == (2, 8, 1.0)
    assert p.fp32_tflops == pytest.approx(p.compute_units * p.fp32_lanes_per_unit * 2 * p.clock_ghz / 1e3)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=32, max_size=32),
       st.sampled_from(["ADD", "MIN", "MAX", "EXCH", "AND", "OR", "XOR", "INC", "DEC"]))
def test_atomics_match_a_sequential_reference(addresses, op):
    from lapis.hardware import atomics
    memory = np.arange(8, dtype=np.uint32) * 5
    values = np.arange(32, dtype=np.uint32) * 3 % 17
    expected_mem, expected_old = memory.copy(), []
    for addr, v in zip(addresses, values, strict=True):
        old, v = int(expected_mem[addr]), int(v)
        expected_old.append(old)
        expected_mem[addr] = {"ADD": old + v, "MIN": min(old, v), "MAX": max(old, v), "EXCH": v, "AND": old & v,
                              "OR": old | v, "XOR": old ^ v, "INC": 0 if old >= v else old + 1,
                              "DEC": v if old == 0 or old > v else old - 1}[op]
    old = atomics.apply(memory, np.array(addresses), values, op, "U32" if op in ("INC", "DEC") else "S32")
    assert np.array_equal(old, expected_old)
    assert np.array_equal(memory, expected_mem)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=32, max_size=32), st.sampled_from(["ADD", "MIN", "MAX", "EXCH"]))
def test_float64_atomics_match_a_sequential_reference(addresses, op):
    """F64 atomics on 64-bit words: MIN, MAX and EXCH exactly as one lane after another; ADD within float64 rounding
    (each address's lanes are summed wider and rounded once)."""
    from lapis.hardware import atomics
    memory = (np.arange(8) * 0.7 - 2).view(np.uint64).copy()
    values = (np.arange(32) * 1.3 % 5 - 2.5).view(np.uint64)
    expected_mem, expected_old = memory.view(np.float64).copy(), []
    for addr, v in zip(addresses, values.view(np.float64), strict=True):
        old = expected_mem[addr]
        expected_old.append(old)
        expected_mem[addr] = {"ADD": old + v, "MIN": min(old, v), "MAX": max(old, v), "EXCH": v}[op]
    old = atomics.apply(memory, np.array(addresses), values, op, "F64").view(np.float64)
    if op == "ADD":
        assert np.allclose(old, expected_old, rtol=1e-15, atol=1e-14)
        assert np.allclose(memory.view(np.float64), expected_mem, rtol=1e-15, atol=1e-14)
    else:
        assert np.array_equal(old, expected_old) and np.array_equal(memory.view(np.float64), expected_mem)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=80),
       st.lists(st.sampled_from([1.0, -2.5, 0.1, 1e20, -1e20, 3e-39, np.inf]), min_size=80, max_size=80))
def test_float_atomic_adds_sum_each_address_on_its_own(addresses, values):
    """Float32 ADD: each address's lanes in lane order, in float64 from the value memory held, each observed value
    and the total rounded once; a large value or an infinity at one address changes no other address's sums (a
    running sum over every address once lost them), and an address with more lanes than ROUNDS too."""
    from lapis.hardware import atomics
    addresses = addresses + [3] * 40                           # one crowded address
    values = np.resize(np.array(values, np.float32), len(addresses))
    memory = np.array([0.5, -1.0, 0.0, 2.0], np.float32)
    running = memory.astype(np.float64)
    seen = []
    for a, v in zip(addresses, values, strict=True):
        seen.append(running[a])
        running[a] += np.float64(v)
    raw = memory.view(np.uint32).copy()
    old = atomics.apply(raw, np.array(addresses), values.view(np.uint32), "ADD", "F32").view(np.float32)
    np.testing.assert_array_equal(old, np.array(seen).astype(np.float32))
    np.testing.assert_array_equal(raw.view(np.float32), running.astype(np.float32))


def test_assembler_reads_absolute_values():
    inst = isa.parse_instruction("FADD R1, -|R2|, |c[0x0][0x10]| ;")
    assert (inst.neg, inst.abs_) == ("a", "ab")
    assert isa.format_instruction(inst) == "FADD R1, -|R2|, |c[0x0][0x10]| ;"
    assert isa.decode(isa.encode(inst)) == inst
    assert pointers(1) == (1).to_bytes(8, "little")


def fma_in_numpy(a, b, c):
    """a * b + c of float32s rounded once, in numpy alone: the product is exact in float64; the sum is rounded to
    float64 *to odd* (the nearest float64, moved to its odd neighbour where it is even and the sum inexact, which
    way TwoSum's error says), which then rounds to float32 as the exact sum would (53 bits >= 24 + 2)."""
    p = a.astype(np.float64) * b.astype(np.float64)
    z = c.astype(np.float64)
    s = p + z
    t = s - p
    with np.errstate(invalid="ignore"):
        error = (p - (s - t)) + (z - t)
        bits = s.view(np.int64)
        even = (error != 0) & ((bits & 1) == 0) & np.isfinite(s)
    bits = np.where(even, bits + np.where((error > 0) == (s > 0), 1, -1), bits)
    return bits.view(np.float64).astype(np.float32)


def test_ffma_s_arithmetic_is_the_fused_multiply_add_ieee_defines():
    """numerics.fma (the reference's FFMA, over the host's fused multiply-add) against the construction in numpy
    alone, on random bit patterns (every magnitude, infinities and NaN), cancelling sums and subnormal results."""
    from lapis.hardware.numerics import fma
    near = np.random.default_rng(11)
    n = 200_000
    random_bits = near.integers(0, 2**32, (3, n), dtype=np.uint64).astype(np.uint32).view(np.float32)
    a, b = near.standard_normal((2, n)).astype(np.float32)
    cancelling = (-(a.astype(np.float64) * b) * (1 + near.standard_normal(n) * 1e-7)).astype(np.float32)
    tiny = (near.standard_normal((3, n)) * [[1e-20], [1e-20], [1e-39]]).astype(np.float32)
    for x, y, z in (random_bits, (a, b, cancelling), tiny):
        with np.errstate(all="ignore"):
            got, want = fma(x, y, z), fma_in_numpy(x, y, z)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)) or \
            np.array_equal(got, want, equal_nan=True)
