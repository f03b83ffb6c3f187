"""Layer 0: the copy engine (DMA): moves bytes between host memory and VRAM, or within VRAM.

It executes linear-copy packets on behalf of the command processor. Both ends are GPU
virtual addresses translated by the MMU; the part of a copy that touches host memory
crosses PCIe and is charged to the link, the rest runs at HBM speed (read plus write).
"""

from lapis import trace
from lapis.hardware.pcie import TO_DEVICE, TO_HOST


class CopyEngine:
    def __init__(self, gpu):
        self.gpu = gpu
        self.bytes_copied = 0

    def copy(self, vmid: int, src: int, dst: int, size: int) -> None:
        gpu = self.gpu
        src_pieces = gpu.mmu.translate_range(vmid, src, size, write=False)
        dst_pieces = gpu.mmu.translate_range(vmid, dst, size, write=True)
        data = b"".join(gpu.memory(system).read(pa, n) for system, pa, n in src_pieces)
        host_in = sum(n for system, _, n in src_pieces if system)
        host_out = sum(n for system, _, n in dst_pieces if system)
        start = gpu.clock.now_ns
        if host_in:
            gpu.pcie.transfer(TO_DEVICE, host_in, "copy engine DMA read of host memory")
        if host_out:
            gpu.pcie.transfer(TO_HOST, host_out, "copy engine DMA write to host memory")
        local = 2 * size - host_in - host_out
        gpu.clock.advance(local / gpu.profile.memory_bandwidth * 1e9)
        offset = 0
        for system, pa, n in dst_pieces:
            gpu.memory(system).write(pa, data[offset:offset + n])
            offset += n
        self.bytes_copied += size
        trace.emit(0, "copy", sim_start_ns=start, sim_end_ns=gpu.clock.now_ns, device=gpu.name, src=src, dst=dst,
                   bytes=size, pcie_bytes=host_in + host_out)
