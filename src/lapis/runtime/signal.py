"""Layer 2: HSA signals: a 64-bit value in memory both the CPU and the GPU can reach.

A signal handle is the GPU address of its signal object (`lapis.abi.SignalObject`). The
device completes a packet by decrementing the value; a failed packet leaves it negative.
When it completes a packet, the device also writes the packet's start and end times on its
clock into the signal object (`timestamps()`), as the CP writes amd_signal_t's start_ts and
end_ts. A signal created with an event has its object name the driver event's mailbox, so the
device posts an interrupt when it changes the value and a waiting thread sleeps in the
driver (WAIT_EVENTS) until then, instead of spinning. The mailbox address and event id sit in
memory a kernel can write, so a waiter also wakes every `INTERRUPT_RECHECK_S` to read the value
itself: a lost interrupt costs it that long, never a hang.
"""

import operator
import struct
import threading
import time
from enum import Enum

from lapis import abi, driver, trace
from lapis.runtime.errors import HsaError


class Condition(Enum):
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    GTE = "gte"


# The longest a waiter sleeps on its event before it reads the signal's value again: the interrupt may never come
# (a stray store zeroed the mailbox address, or changed the event id), while the value has already changed.
INTERRUPT_RECHECK_S = 0.1

_TESTS = {Condition.EQ: operator.eq, Condition.NE: operator.ne, Condition.LT: operator.lt, Condition.GTE: operator.ge}


def _holds(cond: Condition, value: int, target: int) -> bool:
    return _TESTS[cond](value, target)


class SignalDestroyed(HsaError):
    pass


class Signal:
    def __init__(self, pool: "SignalPool", slot: int, event_id: int | None):
        self.pool, self.slot, self.event_id = pool, slot, event_id
        self.handle = pool.buffer.va + slot * abi.SIGNAL_BYTES
        self._offset = slot * abi.SIGNAL_BYTES
        self.destroyed = False

    def _view(self):
        if self.destroyed:
            raise SignalDestroyed(f"signal {self.handle:#x} was destroyed")
        return self.pool.buffer.host

    def load(self) -> int:
        return struct.unpack_from("<q", self._view(), self._offset + abi.SIGNAL_VALUE_OFFSET)[0]

    def timestamps(self) -> tuple[int, int]:
        """(start_ts, end_ts): the device clock, in ns, when the packet this signal completed began and
        ended, as the command processor wrote them (hsa_amd_profiling_get_dispatch_time reads these).
        Meaningful once the signal has been completed; both are 0 before."""
        return struct.unpack_from("<QQ", self._view(), self._offset + abi.SIGNAL_START_TS_OFFSET)

    def store(self, value: int) -> None:
        struct.pack_into("<q", self._view(), self._offset + abi.SIGNAL_VALUE_OFFSET, value)

    def _rmw(self, fn) -> int:
        with self.pool.lock:
            old = self.load()
            self.store(fn(old))
            return old

    def add(self, n: int) -> int:
        return self._rmw(lambda v: v + n)

    def subtract(self, n: int) -> int:
        return self._rmw(lambda v: v - n)

    def exchange(self, value: int) -> int:
        return self._rmw(lambda v: value)

    def cas(self, expected: int, value: int) -> int:
        return self._rmw(lambda v: value if v == expected else v)

    def wait(self, cond: Condition, target: int, timeout_s: float | None = None) -> int:
        """Block until `value cond target` (or a failure makes it negative); returns the value seen."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        kfd = self.pool.runtime.kfd
        while True:
            value = self.load()
            if _holds(cond, value, target) or value < 0:
                trace.emit(2, "signal_wait", signal=self.handle, condition=cond.name, target=target, value=value)
                return value
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return value
            if self.event_id is None:
                time.sleep(0.0005)
                continue
            sleep_s = INTERRUPT_RECHECK_S if remaining is None else min(remaining, INTERRUPT_RECHECK_S)
            kfd.ioctl(driver.Ioctl.WAIT_EVENTS, driver.WaitEventsArgs([self.event_id], False,
                                                                      max(1, int(sleep_s * 1000))))

    def destroy(self) -> None:
        self.pool.release(self)


class SignalPool:
    """Signal objects packed into one host buffer that every GPU of the process can write."""

    SLOTS = 1024

    def __init__(self, runtime):
        self.runtime = runtime
        self.lock = threading.Lock()
        host = runtime.host_pool_any()
        self.buffer = host.allocate(self.SLOTS * abi.SIGNAL_BYTES, internal=True)
        host.allow_access(self.buffer, runtime.gpu_agents)
        self.free_slots = list(range(self.SLOTS - 1, -1, -1))

    def create(self, initial: int, interrupt: bool = True) -> Signal:
        with self.lock:
            if not self.free_slots:
                raise HsaError(f"out of signals ({self.SLOTS} per process)")
            slot = self.free_slots.pop()
        event = mailbox = None
        if interrupt:
            r = self.runtime.kfd.ioctl(driver.Ioctl.CREATE_EVENT, driver.CreateEventArgs(auto_reset=True))
            event, mailbox = r.event_id, r.mailbox_address
        signal = Signal(self, slot, event)
        obj = abi.SignalObject(value=initial, event_mailbox_ptr=mailbox or 0, event_id=event or 0)
        self.buffer.host[slot * abi.SIGNAL_BYTES:(slot + 1) * abi.SIGNAL_BYTES] = memoryview(obj.pack())
        return signal

    def release(self, signal: Signal) -> None:
        if signal.destroyed:
            raise SignalDestroyed(f"signal {signal.handle:#x} was already destroyed")
        signal.destroyed = True
        if signal.event_id is not None:
            self.runtime.kfd.ioctl(driver.Ioctl.DESTROY_EVENT, driver.EventArgs(signal.event_id))
        with self.lock:
            self.free_slots.append(signal.slot)
