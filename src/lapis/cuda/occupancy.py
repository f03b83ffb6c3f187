"""Layer 3: the occupancy calculator (CUDA's cudaOccupancyMaxActiveBlocksPerMultiprocessor, HIP's
hipOccupancyMaxActiveBlocksPerMultiprocessor, numba's max_cooperative_grid_blocks).

How many blocks of a kernel fit on one multiprocessor at once, from the device's published properties (the
driver's topology), by the rule of NVIDIA's CUDA Occupancy Calculator: the least of the block slots, the threads
(in whole warps), the registers (a warp is given them in chunks of `register_allocation_unit`) and the shared
memory. The simulated GPU applies the same rule when it schedules blocks (`lapis.hardware.perf.occupancy`; a test
holds the two to the same answers); a runtime computes it from properties because it cannot ask the hardware.
"""


def max_active_blocks_per_multiprocessor(props, threads_per_block: int, registers: int, shared_bytes: int) -> int:
    """Blocks of `threads_per_block` threads, `registers` registers a thread and `shared_bytes` of shared memory a
    block that one multiprocessor holds at once (0 when a single block does not fit)."""
    if not 0 < threads_per_block <= props.max_threads_per_block or shared_bytes > props.shared_per_block:
        return 0
    warps = -(-threads_per_block // props.warp_size)
    unit = props.register_allocation_unit
    registers_per_warp = -(-max(registers, 1) * props.warp_size // unit) * unit
    by_shared = props.shared_per_unit // shared_bytes if shared_bytes else props.max_blocks_per_unit
    return min(props.max_blocks_per_unit, props.max_threads_per_unit // (warps * props.warp_size),
               props.registers_per_unit // (registers_per_warp * warps), by_shared)


def max_cooperative_grid_blocks(props, threads_per_block: int, registers: int, shared_bytes: int) -> int:
    """The most blocks a cooperative launch may have: as many as the whole device holds at once."""
    return max_active_blocks_per_multiprocessor(props, threads_per_block, registers, shared_bytes) * props.compute_units
