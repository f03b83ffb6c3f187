"""Layer 0: the PCIe link between the host and one GPU.

Every byte that moves between host and device passes through `PcieLink.transfer`: register
and doorbell writes from the CPU (MMIO), the command processor fetching packets and kernel
arguments from host memory, signal updates and interrupts written back, and copy-engine
DMA. The link counts bytes in each direction and models each transaction's time as
latency + bytes / bandwidth on the device's simulated clock.
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

    def transfer(self, direction: str, nbytes: int, what: str) -> float:
        """Account one transaction and return its modelled duration in ns."""
        ns = self.latency_ns + nbytes / self.bandwidth * 1e9
        self.bytes[direction] += nbytes
        self.transactions += 1
        self.busy_ns += ns
        clock = self.clock
        with clock.lock:                     # DeviceClock.advance, inlined: a dispatch makes about eight transfers
            start = clock.now_ns
            clock.now_ns = end = start + ns
        if trace.enabled():
            trace.emit(0, "pcie", sim_start_ns=start, sim_end_ns=end, device=self.device_name,
                       direction=direction, bytes=nbytes, what=what, modelled_ns=ns)
        return ns
