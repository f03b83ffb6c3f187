"""Layer 0: the SIMT core executing assembled machine code, its faults, and the memory path."""

import struct
import tracemalloc

import numpy as np
import pytest

from conftest import VMID, Bench, pointers
from lapis.hardware import copy_engine
from lapis.hardware.mmu import PTE_WRITABLE, MemoryFault
from lapis.hardware.simt import KernelFault
from lapis.hardware.simt.scheduler import SimtCore

# out[tid] = a[tid] + b[tid] for a grid of blocks; kernargs: a, b, out pointers at 0x160.
VECADD = """
    S2R R0, SR_TID.X ;
    S2R R1, SR_CTAID.X ;
    IMAD R0, R1, c[0x0][0x0], R0 ;
    LDC.64 R2, c[0x0][0x160] ;
    IMAD.WIDE R2, R0, 0x4, R2 ;
    LDC.64 R4, c[0x0][0x168] ;
    IMAD.WIDE R4, R0, 0x4, R4 ;
    LDG.E R6, [R2.64] ;
    LDG.E R7, [R4.64] ;
    FADD R6, R6, R7 ;
    LDC.64 R2, c[0x0][0x170] ;
    IMAD.WIDE R2, R0, 0x4, R2 ;
    STG.E [R2.64], R6 ;
    EXIT ;
"""


def test_vector_add_and_counters(bench):
    n = 4 * 64
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    out = np.zeros(n, np.float32)
    pa, pb, po = bench.buffer(a), bench.buffer(b), bench.buffer(out)
    c = bench.run(VECADD, grid=(4, 1, 1), block=(64, 1, 1), args=pointers(pa, pb, po))
    assert np.array_equal(bench.read(po, out), a + b)
    assert c.total_thread_instructions == 14 * n
    assert c.total_warp_instructions == 14 * n // 32
    assert c.flops == n
    assert c.global_bytes == 3 * 4 * n
    assert c.global_sectors == 3 * n * 4 // 32          # fully coalesced: 4 sectors per warp per access


def _store_r5(index_reg: str = "R0") -> str:
    return f"""
    LDC.64 R2, c[0x0][0x160] ;
    IMAD.WIDE R2, {index_reg}, 0x4, R2 ;
    STG.E [R2.64], R5 ;
    EXIT ;
"""


def test_divergent_if_else_and_nested_branches(bench):
    # r5 = (tid & 1) ? ((tid & 2) ? 30 : 10) : 20, with reconvergence before the store.
    src = """
        S2R R0, SR_TID.X ;
        LOP.AND R1, R0, 0x1 ;
        ISETP.EQ.U32.AND P0, R1, 0x0, PT ;
        @P0 BRA else ;
        LOP.AND R1, R0, 0x2 ;
        ISETP.NE.U32.AND P1, R1, 0x0, PT ;
        MOV R5, 0xa ;
        @!P1 BRA join ;
        MOV R5, 0x1e ;
        BRA join ;
    else:
        MOV R5, 0x14 ;
    join:
    """ + _store_r5()
    out = np.zeros(32, np.int32)
    po = bench.buffer(out)
    bench.run(src, args=pointers(po))
    tid = np.arange(32)
    expect = np.where(tid & 1, np.where(tid & 2, 30, 10), 20)
    assert np.array_equal(bench.read(po, out), expect)


def test_loop_with_a_different_trip_count_per_lane(bench):
    # r5 = sum(range(tid)): lane t loops t times, then all lanes store together.
    src = """
        S2R R0, SR_TID.X ;
        MOV R5, 0x0 ;
        MOV R6, 0x0 ;
    top:
        ISETP.GE.S32.AND P0, R6, R0, PT ;
        @P0 BRA done ;
        IADD R5, R5, R6 ;
        IADD R6, R6, 0x1 ;
        BRA top ;
    done:
    """ + _store_r5()
    out = np.zeros(64, np.int32)
    po = bench.buffer(out)
    c = bench.run(src, block=(64, 1, 1), args=pointers(po))
    tid = np.arange(64)
    assert np.array_equal(bench.read(po, out), tid * (tid - 1) // 2)
    assert c.total_thread_instructions < c.total_warp_instructions * 32     # some lanes sat idle


def test_early_exit_of_some_lanes(bench):
    src = """
        S2R R0, SR_TID.X ;
        ISETP.LT.S32.AND P0, R0, 0x5, PT ;
        @P0 EXIT ;
        MOV R5, 0x7 ;
    """ + _store_r5()
    out = np.full(32, -1, np.int32)
    po = bench.buffer(out)
    bench.run(src, args=pointers(po))
    assert np.array_equal(bench.read(po, out), np.where(np.arange(32) < 5, -1, 7))


def test_shared_memory_is_per_block_and_barriers_order_it(bench):
    # Each thread writes its block id + tid to shared, syncs, reads its neighbour's word.
    src = """
        S2R R0, SR_TID.X ;
        S2R R1, SR_CTAID.X ;
        IMAD R5, R1, 0x64, R0 ;
        SHL R7, R0, 0x2 ;
        STS [R7], R5 ;
        BAR.SYNC 0x0 ;
        IADD R8, R0, 0x1 ;
        LOP.AND R8, R8, 0x1f ;
        SHL R8, R8, 0x2 ;
        LDS R5, [R8] ;
        IMAD R0, R1, 0x20, R0 ;
    """ + _store_r5()
    out = np.zeros(3 * 32, np.int32)
    po = bench.buffer(out)
    c = bench.run(src, grid=(3, 1, 1), args=pointers(po), shared=128)
    blk, tid = np.divmod(np.arange(96), 32)
    assert np.array_equal(bench.read(po, out), blk * 100 + (tid + 1) % 32)
    assert c.barriers == 3


@pytest.mark.parametrize("sim", ["translated", "reference"])
def test_lanes_waiting_at_a_branch_target_stay_the_lanes_that_jumped(sim, monkeypatch):
    # The lanes that fall through rewrite the branch's predicate and exit before the others run.
    monkeypatch.setenv("LAPIS_SIM", sim)
    bench = Bench()
    src = """
        S2R R0, SR_TID.X ;
        MOV R5, 0x2 ;
        ISETP.LT.S32.AND P0, R0, 0x10, PT ;
        @P0 BRA jumped ;
        ISETP.GE.S32.AND P0, R0, 0x0, PT ;
        EXIT ;
    jumped:
    """ + _store_r5()
    out = np.zeros(32, np.int32)
    po = bench.buffer(out)
    bench.run(src, args=pointers(po))
    assert np.array_equal(bench.read(po, out), np.where(np.arange(32) < 16, 2, 0))


def test_barrier_under_divergence_faults(bench):
    src = """
        S2R R0, SR_TID.X ;
        ISETP.LT.S32.AND P0, R0, 0x10, PT ;
        @P0 BRA skip ;
        BAR.SYNC 0x0 ;
    skip:
        EXIT ;
    """
    with pytest.raises(KernelFault, match="barrier reached under divergence") as e:
        bench.run(src)
    assert e.value.pc == 0x30 and "BAR.SYNC" in e.value.instruction


def test_unmapped_access_names_instruction_and_address(bench):
    src = """
        LDC.64 R2, c[0x0][0x160] ;
        LDG.E R4, [R2.64+0x40] ;
        EXIT ;
    """
    with pytest.raises(KernelFault) as e:
        bench.run(src, args=pointers(0x1234_0000))
    assert e.value.address == 0x1234_0040
    assert e.value.pc == 0x10 and e.value.instruction.startswith("LDG.E R4, [R2.64+0x40]")
    assert "not mapped" in str(e.value)


def test_misaligned_and_read_only_accesses_fault(bench):
    data = bench.buffer(np.zeros(16, np.float32))
    with pytest.raises(KernelFault, match="misaligned 4-byte access"):
        bench.run("LDC.64 R2, c[0x0][0x160] ;\nLDG.E R4, [R2.64+0x2] ;\nEXIT ;", args=pointers(data))
    with pytest.raises(KernelFault, match="outside the block's 64 bytes"):
        bench.run("MOV R1, 0x40 ;\nLDS R2, [R1] ;\nEXIT ;", shared=64)


def test_unmapping_flushes_the_tlb(bench):
    data = np.arange(32, dtype=np.float32)
    va = bench.buffer(data)
    src = "LDC.64 R2, c[0x0][0x160] ;\nLDG.E R4, [R2.64] ;\nEXIT ;"
    bench.run(src, args=pointers(va))
    bench.space.unmap(va, data.nbytes)
    with pytest.raises(KernelFault, match="not mapped"):
        bench.run(src, args=pointers(va))


def test_the_front_ends_recent_runs_follow_the_tlb(bench):
    """`Mmu.hit` keeps the run each page's last access found; a remapping (which invalidates the TLB) must not leave
    the old run answering, and a kept run still refuses an access it does not allow or that runs past it."""
    data = np.arange(1024, dtype=np.float32)
    va = bench.buffer(data)
    mmu, vmid = bench.gpu.mmu, bench.space.vmid
    mmu.translate_range(vmid, va, 4, write=False)             # fills the TLB
    run = mmu.hit(vmid, va + 8, 4, False)
    assert run is not None and mmu.hit(vmid, va + 8, 4, False) is run
    assert mmu.hit(vmid, va + 8, 4, False, execute=True) is None          # data pages are not executable
    assert mmu.hit(vmid, run.va_end - 4, 8, False) is None                 # past the run: the caller's slow path
    old_pa = run.pa_start
    bench.space.unmap(va, data.nbytes)
    assert mmu.hit(vmid, va + 8, 4, False) is None
    pa = bench.vram.alloc(data.nbytes)                        # the same addresses, other memory
    bench.space.map(va, pa, data.nbytes, PTE_WRITABLE)
    mmu.translate_range(vmid, va, 4, write=False)
    assert pa != old_pa and mmu.hit(vmid, va + 8, 4, False).pa_start == pa


def test_one_tlb_miss_fills_the_pages_around_it(bench):
    """A walk fills the whole leaf table's runs: the other pages of a buffer, and a neighbouring
    buffer, translate without walking again; a page outside any buffer still faults."""
    first = bench.buffer(np.zeros(3 * 4096 // 4, np.float32))
    second = bench.buffer(np.zeros(1024, np.float32))
    mmu, vmid = bench.gpu.mmu, bench.space.vmid
    mmu.invalidate(vmid)
    mmu.translate_range(vmid, first, 4, write=False)
    walks = mmu.walks
    assert mmu.translate_range(vmid, first + 2 * 4096 + 8, 8, write=True)[0][2] == 8
    mmu.translate_range(vmid, second + 100, 4, write=False)
    assert mmu.walks == walks
    with pytest.raises(MemoryFault, match="not mapped"):
        mmu.translate_range(vmid, first + 3 * 4096 + 100 * 4096, 4, write=False)


def test_watchdog_stops_an_infinite_loop(bench):
    with pytest.raises(KernelFault, match="watchdog"):
        bench.run("top:\nBRA top ;", watchdog=1000)


def test_warp_size_follows_the_profile(bench64):
    out = np.zeros(128, np.int32)
    po = bench64.buffer(out)
    bench64.run("S2R R0, SR_TID.X ;\nS2R R5, SR_LANEID ;" + _store_r5(), block=(128, 1, 1), args=pointers(po))
    assert np.array_equal(bench64.read(po, out), np.arange(128) % 64)


def test_64_bit_and_float64_arithmetic(bench):
    # out[tid] = (double)tid * 0.5 + 2^40 as int64 math and a DFMA.
    src = """
        S2R R0, SR_TID.X ;
        I2I.S64.S32 R4, R0 ;
        MOV R6, 0x0 ;
        MOV R7, 0x100 ;
        IADD.64 R4, R4, R6 ;
        I2F.F64.S64 R8, R4 ;
        MOV R10, 0x0 ;
        MOV R11, 0x3fe00000 ;
        DMUL R8, R8, R10 ;
        LDC.64 R2, c[0x0][0x160] ;
        IMAD.WIDE R2, R0, 0x8, R2 ;
        STG.E.64 [R2.64], R8 ;
        EXIT ;
    """
    out = np.zeros(32, np.float64)
    po = bench.buffer(out)
    bench.run(src, args=pointers(po))
    assert np.array_equal(bench.read(po, out), (np.arange(32) + 2.0**40) * 0.5)


def test_global_access_to_host_memory_crosses_pcie(bench):
    host = bench.buffer(np.arange(32, dtype=np.float32), system=True)
    before = bench.gpu.pcie.bytes["host->device"]
    c = bench.run("LDC.64 R2, c[0x0][0x160] ;\nS2R R0, SR_TID.X ;\nIMAD.WIDE R2, R0, 0x4, R2 ;\nLDG.E R4, [R2.64] ;\n"
                  "EXIT ;", args=pointers(host))
    assert c.pcie_bytes == 128
    assert bench.gpu.pcie.bytes["host->device"] >= before


def test_doorbell_write_crosses_pcie(bench):
    before = (bench.gpu.pcie.bytes["host->device"], bench.gpu.pcie.transactions)
    bench.gpu.ring_doorbell(7, 0)     # no queue behind it: dropped, but the write still crossed the link
    assert bench.gpu.pcie.bytes["host->device"] == before[0] + 8
    assert bench.gpu.pcie.transactions == before[1] + 1


def test_sparse_memory_takes_no_host_ram_for_untouched_vram(bench):
    assert bench.gpu.vram.size == 141 * 10**9
    bench.gpu.vram.write(100 * 10**9, struct.pack("<I", 7))
    assert bench.gpu.vram.read(100 * 10**9, 4) == struct.pack("<I", 7)


def test_an_address_at_or_above_bit_48_is_unmapped_not_an_alias_of_its_low_bits(bench):
    va = bench.buffer(np.arange(1024, dtype=np.uint32))
    mmu, vmid = bench.gpu.mmu, VMID
    for far in (va + 2**48, va + 2**52, va | 2**63):
        with pytest.raises(MemoryFault, match="not mapped"):
            mmu.translate_range(vmid, far, 4, write=False)
        with pytest.raises(MemoryFault, match="not mapped"):
            mmu.translate(vmid, np.array([far], np.uint64), 4, write=True)
    with pytest.raises(KernelFault, match="not mapped") as e:
        bench.run("LDC.64 R2, c[0x0][0x160] ;\nLDG.E R4, [R2.64] ;\nEXIT ;", args=pointers(va + 2**48))
    assert e.value.address == va + 2**48


def test_a_copy_of_a_huge_range_faults_at_its_first_unmapped_page_in_bounded_host_memory(bench):
    """The MMU walks a range a slice at a time: a 16 GiB copy packet over a 1-page buffer costs the host a few
    megabytes (a terabyte's would cost the same), not a page list of the whole range; and a copy that faults
    writes nothing."""
    src = bench.buffer(np.arange(1024, dtype=np.uint32))
    dst = bench.buffer(np.zeros(1024, np.uint32))
    tracemalloc.start()
    try:
        with pytest.raises(MemoryFault, match="not mapped") as e:
            bench.gpu.copy_engine.copy(VMID, src, dst, 2**34)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert src < e.value.va < src + 0x20000          # the first page past the buffer's
    assert peak < 16 << 20, f"{peak} bytes of host memory"
    assert not bench.read(dst, np.zeros(1024, np.uint32)).any()


@pytest.mark.parametrize("src_at, dst_at", [(0, 0x1000), (0x1000, 0), (0, 0x1234), (0x3000, 0x10)])
def test_the_copy_engine_moves_a_copy_a_chunk_at_a_time_as_memmove_does(bench, monkeypatch, src_at, dst_at):
    monkeypatch.setattr(copy_engine, "COPY_CHUNK", 4096)
    data = np.arange(40 * 1024, dtype=np.uint8) * np.uint8(7)
    va = bench.buffer(data)
    size = 24 * 1024
    bench.gpu.copy_engine.copy(VMID, va + src_at, va + dst_at, size)
    expect = data.copy()
    expect[dst_at:dst_at + size] = data[src_at:src_at + size]
    assert np.array_equal(bench.read(va, data), expect)


def test_a_batch_holds_at_most_max_local_bytes_of_local_memory(monkeypatch):
    """Local memory is host memory: a launch of many threads with big local arrays runs in batches small enough
    that their local memory stays within the simulator's bound, with the same results."""
    monkeypatch.setattr(SimtCore, "MAX_LOCAL_BYTES", 4 << 20)
    bench = Bench()
    blocks, threads, local = 64, 256, 4096            # 64 MiB of local memory if every block ran at once
    out = np.zeros(blocks * threads, np.uint32)
    po = bench.buffer(out)
    bench.run("""
        S2R R0, SR_TID.X ;
        S2R R1, SR_CTAID.X ;
        IMAD R7, R1, c[0x0][0x0], R0 ;
        MOV R6, 0xffc ;
        STL [R6], R7 ;
        LDL R5, [R6] ;
        LDC.64 R2, c[0x0][0x160] ;
        IMAD.WIDE R2, R7, 0x4, R2 ;
        STG.E [R2.64], R5 ;
        EXIT ;
    """, grid=(blocks, 1, 1), block=(threads, 1, 1), args=pointers(po), local=local)
    assert np.array_equal(bench.read(po, out), np.arange(blocks * threads, dtype=np.uint32))
    assert bench.gpu.simt.caches._arrays["local"].nbytes <= 4 << 20
