"""Layer 2: user-mode AQL queues: a ring of 64-byte packets in host memory plus a doorbell.

Submission follows the HSA protocol: reserve a packet index (the 64-bit write index only
grows), wait until the slot is free (index - read index < size), write the packet body
with the header still INVALID, publish the header last, then ring the doorbell with the
index. The device's packet processor reads the ring, runs packets in order, resets each
header to INVALID and advances the read index, which it writes back into host memory.
"""

import struct
import threading
import time

from lapis import abi, driver, trace
from lapis.runtime.errors import HsaError
from lapis.runtime.signal import Condition


class QueueError(HsaError):
    """The queue stopped on an error (a malformed packet or a faulting kernel)."""

    def __init__(self, message: str, detail: dict | None = None):
        super().__init__(message)
        self.detail = detail or {}


class QueueFull(QueueError):
    pass


def describe_packet(raw: bytes) -> dict:
    """The decoded fields of a packet, by its type."""
    header = struct.unpack_from("<H", raw)[0]
    kind = header & 0xFF
    layout = {abi.PACKET_TYPE_KERNEL_DISPATCH: abi.KernelDispatchPacket, abi.PACKET_TYPE_BARRIER_AND: abi.BarrierPacket,
              abi.PACKET_TYPE_BARRIER_OR: abi.BarrierPacket,
              abi.PACKET_TYPE_VENDOR_SPECIFIC: abi.CopyPacket}.get(kind)
    fields = layout.unpack(raw).as_dict() if layout else {"header": header}
    fields["header"] = {"type": abi.PACKET_TYPE_NAMES.get(kind, kind),
                        **{k: v for k, v in abi.header_fields(header).items() if k != "type"}}
    return fields


class AqlQueue:
    """A user-mode queue. `error_callback(queue, QueueError)`, if given, is called once, from the
    runtime's event thread, when the queue stops on an error (as hsa_queue_create's callback)."""

    def __init__(self, runtime, agent, packets: int = 256, kind: str = "compute", error_callback=None):
        if packets < 1 or packets & (packets - 1):
            raise ValueError(f"queue size must be a power of two, got {packets}")
        self.runtime, self.agent, self.size, self.kind = runtime, agent, packets, kind
        self.error_callback = error_callback
        host = runtime.host_pool(agent)
        self.ring = host.allocate(packets * abi.PACKET_BYTES, internal=True)
        self.indices = host.allocate(64, internal=True)   # write index u64 @0, read index u64 @8
        invalid = struct.pack("<H", abi.make_header(abi.PACKET_TYPE_INVALID))
        for slot in range(packets):
            self.ring.host[slot * abi.PACKET_BYTES:slot * abi.PACKET_BYTES + 2] = memoryview(invalid)
        error_event = runtime.queue_error_event() if error_callback else None
        r = runtime.kfd.ioctl(driver.Ioctl.CREATE_QUEUE, driver.CreateQueueArgs(
            agent.gpu_id, kind, self.ring.va, packets * abi.PACKET_BYTES, self.indices.va + 8, error_event))
        self.queue_id = r.queue_id
        self.doorbell = runtime.kfd.mmap_doorbell(r.queue_id)
        self._lock = threading.Lock()
        self.destroyed = False

    @property
    def write_index(self) -> int:
        return struct.unpack_from("<Q", self.indices.host, 0)[0]

    @property
    def read_index(self) -> int:
        return struct.unpack_from("<Q", self.indices.host, 8)[0]

    def status(self) -> tuple[str, dict | None]:
        r = self.runtime.kfd.ioctl(driver.Ioctl.QUEUE_STATUS, driver.QueueArgs(self.queue_id))
        return r.state, r.error

    def check(self) -> None:
        state, error = self.status()
        if state != "active":
            raise self.error(state, error)

    def error(self, state: str, error: dict | None) -> QueueError:
        return QueueError(f"queue {self.queue_id} on {self.agent.name} is in the {state} state: "
                          f"{(error or {}).get('reason', 'unknown error')}", error)

    def wait(self, signal, target: int = 0, timeout_s: float | None = None) -> int:
        """Wait for a completion signal of a packet on this queue to reach `target`; raise the
        queue's error if the packet failed (the signal went negative) or the queue stopped. A packet
        of a queue that stopped never runs: the device fails it, so this wait ends."""
        value = signal.wait(Condition.LT, target + 1, timeout_s)
        if value < 0:
            if self.destroyed:
                raise QueueError(f"queue {self.queue_id} was destroyed: the packet did not complete")
            state, error = self.status()
            raise self.error(state, error) if state != "active" else QueueError(
                f"a packet on queue {self.queue_id} failed (its completion signal is {value})")
        return value

    def reserve(self, timeout_s: float = 5.0) -> int:
        """Reserve the next packet index once its slot is free (waiting at most `timeout_s`). The caller must
        then write the slot: the packet processor stops at an unwritten one, and every later packet with it, so
        the index advances only when a slot is there to take (a reservation that timed out would leave a hole)."""
        if self.destroyed:
            raise QueueError(f"queue {self.queue_id} was destroyed")
        deadline = time.monotonic() + timeout_s
        with self._lock:
            index = self.write_index
            while index - self.read_index >= self.size:
                self.check()
                if time.monotonic() > deadline:
                    raise QueueFull(f"queue {self.queue_id} is full: packet {index} waited {timeout_s}s for a slot")
                time.sleep(0.0005)
            struct.pack_into("<Q", self.indices.host, 0, index + 1)
        return index

    def submit(self, packet, index: int | None = None) -> int:
        """Write a packet (an abi layout whose header is set) into its slot and ring the doorbell. The packet is
        packed before a slot is reserved: a field out of range raises here and reserves nothing."""
        raw = packet.pack()
        if index is None:
            index = self.reserve()
        slot = index & (self.size - 1)
        view = self.ring.host[slot * abi.PACKET_BYTES:(slot + 1) * abi.PACKET_BYTES]
        view[2:] = memoryview(raw[2:])          # body first, header still INVALID
        view[:2] = memoryview(raw[:2])          # publish: the header is written last
        if trace.enabled():
            trace.emit(2, "packet", queue=self.queue_id, agent=self.agent.name, index=index, slot=slot,
                       ring_va=self.ring.va, slot_va=self.ring.va + slot * abi.PACKET_BYTES, bytes_hex=raw.hex(),
                       fields=describe_packet(raw))
        self.doorbell.write(index)
        return index

    def destroy(self) -> None:
        if self.destroyed:
            return
        self.destroyed = True
        self.runtime.kfd.ioctl(driver.Ioctl.DESTROY_QUEUE, driver.QueueArgs(self.queue_id))
        self.ring.free()
        self.indices.free()
