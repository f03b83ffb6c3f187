"""numba.cuda's cooperative groups: cuda.cg.this_grid().sync() in kernels, cooperative launches and their limits,
and the occupancy calculator they rest on, on both GPU profiles."""

import numpy as np
import pytest

from lapis import abi, cuda, hip
from lapis.cuda import occupancy
from lapis.cuda.context import pack_kernargs
from lapis.cuda.dispatcher import _grid_barrier
from lapis.cuda.errors import KernelFault, LaunchError
from lapis.hardware.perf import occupancy as hardware_occupancy
from lapis.hardware.profiles import PROFILES
from lapis.hardware.simt.scheduler import SimtCore

APIS = pytest.mark.parametrize("api", [cuda, hip], ids=["h200", "mi300x"])


def rotate_kernel(api):
    @api.jit
    def rotate(a, out):
        """Each thread writes its index, the grid waits, then each reads its neighbour's (written by another block)."""
        g = api.cg.this_grid()
        i = api.grid(1)
        a[i] = i
        g.sync()
        out[i] = a[(i + 1) % a.size]
    return rotate


@APIS
@pytest.mark.parametrize("blocks, threads", [(4, 64), (96, 1024)])
def test_a_grid_sync_makes_every_block_s_writes_visible_to_every_other_block(api, blocks, threads):
    # 96 blocks of 1024 threads are more lanes than the simulator runs together in an ordinary launch
    n = blocks * threads
    a, out = api.to_device(np.zeros(n, np.int32)), api.to_device(np.zeros(n, np.int32))
    rotate_kernel(api)[blocks, threads](a, out)
    np.testing.assert_array_equal(out.copy_to_host(), (np.arange(n, dtype=np.int32) + 1) % n)


@cuda.jit
def sequential_rows(M):
    """numba's documentation example's pattern: row r reads row r - 1 reversed, which other blocks wrote."""
    col = cuda.grid(1)
    g = cuda.cg.this_grid()
    rows, cols = M.shape
    for row in range(1, rows):
        M[row, col] = M[row - 1, cols - col - 1] + 1
        g.sync()


def test_a_grid_sync_in_a_loop_orders_each_step_after_the_last():
    M = np.zeros((48, 256), np.int32)
    M[0] = np.arange(256)
    d = cuda.to_device(M)
    sequential_rows[4, 64](d)
    expected = M.copy()
    for row in range(1, 48):
        expected[row] = expected[row - 1][::-1] + 1
    np.testing.assert_array_equal(d.copy_to_host(), expected)


def test_a_grid_sync_over_a_2d_grid_counts_every_block():
    @cuda.jit
    def transpose_through_memory(a, out):
        x, y = cuda.grid(2)
        a[y, x] = y * 100 + x
        cuda.cg.this_grid().sync()
        out[y, x] = a[x, y]
    a, out = cuda.to_device(np.zeros((32, 32), np.int32)), cuda.to_device(np.zeros((32, 32), np.int32))
    transpose_through_memory[(4, 4), (8, 8)](a, out)
    ys, xs = np.mgrid[:32, :32]
    np.testing.assert_array_equal(out.copy_to_host(), xs * 100 + ys)


def test_only_a_kernel_that_syncs_its_grid_is_launched_cooperatively():
    rotate = rotate_kernel(cuda)

    @cuda.jit
    def plain(a):
        a[cuda.grid(1)] = 1
    a, out = cuda.to_device(np.zeros(64, np.int32)), cuda.to_device(np.zeros(64, np.int32))
    rotate[1, 64](a, out)
    plain[1, 64](a)
    assert [k.cooperative for k in rotate.overloads.values()] == [True]
    assert [k.cooperative for k in plain.overloads.values()] == [False]
    assert cuda.get_current_device().COOPERATIVE_LAUNCH == 1


@APIS
def test_max_cooperative_grid_blocks_is_what_the_device_holds_at_once(api):
    rotate = rotate_kernel(api)
    a = api.to_device(np.zeros(64, np.int32))
    rotate[1, 64](a, a)
    compiled = next(iter(rotate.overloads.values()))
    profile = PROFILES[api.get_current_device().profile]
    for threads in (64, 256, 1024):
        held = hardware_occupancy(profile, threads, compiled.registers, compiled.shared_bytes).resident_blocks
        assert rotate.max_cooperative_grid_blocks(threads) == held
    assert rotate.max_cooperative_grid_blocks((16, 16)) == rotate.max_cooperative_grid_blocks(256)
    assert compiled.max_cooperative_grid_blocks(256) == rotate.max_cooperative_grid_blocks(256)   # numba's spelling


def test_a_cooperative_launch_larger_than_the_device_holds_is_refused_before_it_runs():
    rotate = rotate_kernel(cuda)
    a = cuda.to_device(np.zeros(64, np.int32))
    rotate[1, 64](a, a)
    blocks = rotate.max_cooperative_grid_blocks(64) + 1
    big = cuda.to_device(np.full(blocks * 64, 7, np.int32))
    with pytest.raises(LaunchError, match="CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"):
        rotate[blocks, 64](big, big)
    assert (big.copy_to_host() == 7).all()          # nothing ran


def test_the_device_refuses_a_cooperative_packet_whose_grid_cannot_be_resident():
    """Below the dispatcher's check, the command processor's: the packet fails, the stream reports it."""
    rotate = rotate_kernel(cuda)
    a = cuda.to_device(np.zeros(64, np.int32))
    rotate[1, 64](a, a)
    compiled = next(iter(rotate.overloads.values()))
    context = cuda.current_context()
    blocks = rotate.max_cooperative_grid_blocks(64) + 1
    big = cuda.to_device(np.zeros(blocks * 64, np.int32))
    kernargs = pack_kernargs(compiled.arg_layout, [big, big, _grid_barrier(context)])
    context.launch(compiled, kernargs, (blocks, 1, 1), (64, 1, 1), 0, cooperative=True)
    with pytest.raises(KernelFault, match="cooperative dispatch of .* exceeds"):
        context.synchronize()


def test_the_device_refuses_a_cooperative_dispatch_whose_local_memory_the_simulator_cannot_hold(monkeypatch):
    """A cooperative dispatch runs as one batch, and a batch's local memory is host memory: the command processor
    refuses one that needs more than SimtCore.MAX_LOCAL_BYTES at once (here cut to 64 KiB; 4 x 64 threads x 1 KiB
    need 256 KiB), as a fault of its stream."""
    @cuda.jit
    def rotate_through_local(a, out):
        g = cuda.cg.this_grid()
        buf = cuda.local.array(256, np.int32)
        i = cuda.grid(1)
        for j in range(256):
            buf[j] = i
        a[i] = buf[i % 256]
        g.sync()
        out[i] = a[(i + 1) % a.size]

    a, out = cuda.to_device(np.zeros(256, np.int32)), cuda.to_device(np.zeros(256, np.int32))
    monkeypatch.setattr(SimtCore, "MAX_LOCAL_BYTES", 64 << 10)
    with pytest.raises(KernelFault, match="cooperative dispatch of 4 workgroups needs .* bytes of local memory"):
        rotate_through_local[4, 64](a, out)
        cuda.synchronize()
    monkeypatch.undo()
    rotate_through_local[4, 64](a, out)
    np.testing.assert_array_equal(out.copy_to_host(), (np.arange(256) + 1) % 256)


def test_a_grid_barrier_that_never_completes_faults_and_the_next_one_starts_clean():
    @cuda.jit
    def block_one_leaves(a):
        if cuda.blockIdx.x == 1:
            return
        cuda.cg.this_grid().sync()
        a[cuda.grid(1)] = 1
    a = cuda.to_device(np.zeros(256, np.int32))
    with pytest.raises(KernelFault, match="watchdog"):      # CUDA would hang; the simulator's watchdog stops it
        block_one_leaves[4, 64](a)
        cuda.synchronize()
    # the failed barrier counted three of four arrivals: the word is zeroed before its next use
    out = cuda.to_device(np.zeros(256, np.int32))
    rotate_kernel(cuda)[4, 64](a, out)
    np.testing.assert_array_equal(out.copy_to_host(), (np.arange(256) + 1) % 256)


def test_a_cooperative_dispatch_marks_its_packet():
    assert abi.SETUP_COOPERATIVE & 3 == 0         # clear of the dimension bits
    packet = abi.KernelDispatchPacket(setup=2 | abi.SETUP_COOPERATIVE)
    assert abi.KernelDispatchPacket.unpack(packet.pack()).setup == 2 | abi.SETUP_COOPERATIVE


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_occupancy_calculator_agrees_with_the_hardware_s_scheduler(name):
    profile = PROFILES[name]
    props = type("Props", (), {k: getattr(profile, k) for k in (
        "warp_size", "max_threads_per_block", "max_threads_per_unit", "shared_per_block", "shared_per_unit",
        "registers_per_unit", "register_allocation_unit", "max_blocks_per_unit", "compute_units")})
    rng = np.random.default_rng(5)
    for _ in range(300):
        threads = int(rng.integers(1, profile.max_threads_per_block + 1))
        registers = int(rng.integers(1, 129))
        shared = int(rng.choice([0, int(rng.integers(1, profile.shared_per_block + 1))]))
        try:
            expected = hardware_occupancy(profile, threads, registers, shared).blocks_per_unit
        except Exception:
            expected = 0
        assert occupancy.max_active_blocks_per_multiprocessor(props, threads, registers, shared) == expected
