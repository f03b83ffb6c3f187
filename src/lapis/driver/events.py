"""Layer 1: driver events, the objects host threads sleep on until the device interrupts.

Each event has a slot in the process's event page (host memory the GPU can write, like
KFD's signal page): a signal whose completion should wake someone names that slot as its
mailbox. The interrupt handler sets the event and wakes the waiters; waiting is a sleep on
a condition variable with a timeout, never a spin.
"""

import threading
import time
from dataclasses import dataclass
from enum import Enum


class WaitResult(Enum):
    COMPLETE = 0
    TIMEOUT = 1
    FAIL = 2


@dataclass
class Event:
    event_id: int
    auto_reset: bool
    mailbox_va: int
    signaled: bool = False


class EventTable:
    def __init__(self, mailbox_base_va: int, slots: int):
        self.cond = threading.Condition()
        self.events: dict[int, Event] = {}
        self.mailbox_base_va = mailbox_base_va
        self.slots = slots
        self.free = list(range(slots - 1, -1, -1))      # unused event ids
        self.failures = 0          # bumped when a queue of the process errs, waking every waiter

    def create(self, auto_reset: bool) -> Event:
        with self.cond:
            if not self.free:
                raise RuntimeError(f"out of driver events ({self.slots} per process)")
            free = self.free.pop()
            event = Event(free, auto_reset, self.mailbox_base_va + 8 * free)
            self.events[free] = event
            return event

    def destroy(self, event_id: int) -> None:
        with self.cond:
            if self.events.pop(event_id, None) is None:
                raise KeyError(f"event {event_id} does not exist")
            self.free.append(event_id)
            self.cond.notify_all()

    def set(self, event_id: int) -> None:
        with self.cond:
            event = self.events.get(event_id)
            if event is not None:
                event.signaled = True
                self.cond.notify_all()

    def reset(self, event_id: int) -> None:
        with self.cond:
            self.events[event_id].signaled = False

    def fail(self) -> None:
        with self.cond:
            self.failures += 1
            self.cond.notify_all()

    def wait(self, event_ids: list[int], wait_all: bool, timeout_s: float | None) -> WaitResult:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self.cond:
            failures = self.failures
            while True:
                missing = [i for i in event_ids if i not in self.events]
                if missing:
                    raise KeyError(f"event(s) {missing} do not exist (destroyed while waiting?)")
                ready = [self.events[i] for i in event_ids if self.events[i].signaled]
                if (len(ready) == len(event_ids)) if wait_all else ready:
                    for event in ready:
                        if event.auto_reset:
                            event.signaled = False
                    return WaitResult.COMPLETE
                if self.failures != failures:
                    return WaitResult.FAIL
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return WaitResult.TIMEOUT
                self.cond.wait(remaining)
