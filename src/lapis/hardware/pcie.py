"""Layer 0: the PCIe link between the host and one GPU.

Every byte that moves between host and device passes through `PcieLink.transfer`: register
and doorbell writes from the CPU (MMIO), the command processor fetching packets and kernel
arguments from host memory, signal updates and interrupts written back, and copy-engine
DMA. The link counts bytes in each direction and models each transaction's time as
latency + bytes / bandwidth. The device's simulated clock waits out the whole of it only where
the device waits for the data: copy-engine DMA. Elsewhere it moves on by the bytes' time on the
link alone: MMIO and interrupts are posted writes, signal updates posted atomics, and the command
processor fetches packets, descriptors, code and arguments ahead, while the work before them runs
(its fixed cost of a dispatch is the profile's `kernel_launch_ns`), so back-to-back kernels are
as far apart as a real stream's (`benchmarks/micro.py`).
"""

import threading
from dataclasses import dataclass, field

from lapis import trace

TO_DEVICE, TO_HOST = "host->device", "device->host"


@dataclass
class DeviceClock:
    """The simulated time of one device, in nanoseconds."""
    now_ns: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def advance(self, ns: float) -> tuple[float, float]:
        """Move time on by `ns` (host threads and the command processor both do); returns (start, end)."""
        with self.lock:
            start = self.now_ns
            self.now_ns += ns
            return start, self.now_ns


class PcieLink:
    def __init__(self, bandwidth: float, latency_ns: float, clock: DeviceClock, device_name: str):
        self.bandwidth = bandwidth
        self.latency_ns = latency_ns
        self.clock = clock
        self.device_name = device_name
        self.bytes = {TO_DEVICE: 0, TO_HOST: 0}
        self.transactions = 0
        self.busy_ns = 0.0

    def transfer(self, direction: str, nbytes: int, what: str, waited: bool = False) -> float:
        """Account one transaction and return its modelled duration in ns; the device's clock moves on by all of
        it when the device waits for it (`waited`), else by its bytes' time on the link."""
        on_link = nbytes / self.bandwidth * 1e9
        ns = self.latency_ns + on_link
        self.bytes[direction] += nbytes
        self.transactions += 1
        self.busy_ns += ns
        clock = self.clock
        with clock.lock:                     # DeviceClock.advance, inlined: a dispatch makes about eight transfers
            start = clock.now_ns
            clock.now_ns = end = start + (ns if waited else on_link)
        if trace.enabled():
            trace.emit(0, "pcie", sim_start_ns=start, sim_end_ns=end, device=self.device_name,
                       direction=direction, bytes=nbytes, what=what, modelled_ns=ns, waited=waited)
        return ns
