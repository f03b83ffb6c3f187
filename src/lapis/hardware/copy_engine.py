"""Layer 0: the copy engine (DMA): moves bytes between host memory and VRAM, or within VRAM.

It executes linear-copy packets on behalf of the command processor. Both ends are GPU
virtual addresses translated by the MMU; the part of a copy that touches host memory
crosses PCIe and is charged to the link, the rest runs at HBM speed (read plus write).

Both ranges are translated before a byte moves, so a copy that faults writes nothing; the bytes then
move COPY_CHUNK at a time at most, view to view, so a copy as large as the memory costs the host no buffer of
its size. Overlapping ranges copy as memmove does.
"""

from lapis import trace
from lapis.hardware.pcie import TO_DEVICE, TO_HOST

COPY_CHUNK = 64 << 20       # bytes moved at a time


class CopyEngine:
    def __init__(self, gpu):
        self.gpu = gpu
        self.bytes_copied = 0

    def copy(self, vmid: int, src: int, dst: int, size: int) -> None:
        gpu = self.gpu
        src_pieces = gpu.mmu.translate_range(vmid, src, size, write=False)
        dst_pieces = gpu.mmu.translate_range(vmid, dst, size, write=True)
        host_in = sum(n for system, _, n in src_pieces if system)
        host_out = sum(n for system, _, n in dst_pieces if system)
        start = gpu.clock.now_ns
        if host_in:
            gpu.pcie.transfer(TO_DEVICE, host_in, "copy engine DMA read of host memory", waited=True)
        if host_out:
            gpu.pcie.transfer(TO_HOST, host_out, "copy engine DMA write to host memory", waited=True)
        local = 2 * size - host_in - host_out
        gpu.clock.advance(local / gpu.profile.memory_bandwidth * 1e9)
        spans = list(_spans(src_pieces, dst_pieces))
        if src < dst < src + size:        # the destination overlaps the source's end: copy from the end back
            spans.reverse()
        for src_system, src_pa, dst_system, dst_pa, n in spans:
            gpu.memory(dst_system).view(dst_pa, n)[:] = gpu.memory(src_system).view(src_pa, n)
        self.bytes_copied += size
        trace.emit(0, "copy", sim_start_ns=start, sim_end_ns=gpu.clock.now_ns, device=gpu.name, src=src, dst=dst,
                   bytes=size, pcie_bytes=host_in + host_out)


def _spans(src_pieces: list, dst_pieces: list):
    """(src system, src pa, dst system, dst pa, length) spans of at most COPY_CHUNK bytes, each inside one
    source and one destination piece, in order."""
    i = j = src_done = dst_done = 0
    while i < len(src_pieces) and j < len(dst_pieces):
        src_system, src_pa, src_n = src_pieces[i]
        dst_system, dst_pa, dst_n = dst_pieces[j]
        n = min(src_n - src_done, dst_n - dst_done, COPY_CHUNK)
        yield src_system, src_pa + src_done, dst_system, dst_pa + dst_done, n
        src_done, dst_done = src_done + n, dst_done + n
        if src_done == src_n:
            i, src_done = i + 1, 0
        if dst_done == dst_n:
            j, dst_done = j + 1, 0
