"""lapis.trace: the event recorder every layer reports to (cross-cutting; imports no layer).

    with lapis.trace() as t:
        C = lapis.matmul(A, B)
    for e in t.events: print(e.layer, e.name, e.args)

Each layer calls `emit` (an instant) or `span` (a stretch of host wall time) with its layer
number, an event name and the real values of the call. Layer 0 adds simulated device times
(`sim_start_ns`, `sim_end_ns`). When no trace is open, both return at once.
"""

import sys
import threading
import time
import types
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

LAYER_NAMES = {5: "framework", 4: "libraries", 3: "programming interface", 2: "runtime", 1: "driver",
               0: "hardware"}


@dataclass
class Event:
    layer: int
    name: str
    args: dict
    wall_start: float
    wall_end: float
    sim_start_ns: float | None = None
    sim_end_ns: float | None = None
    seq: int = 0
    thread: int = 0             # the host thread that reported it (the device's command processor has its own)

    @property
    def wall_ms(self) -> float:
        return (self.wall_end - self.wall_start) * 1e3


@dataclass
class Trace:
    """A recording: events in the order they started."""
    events: list[Event] = field(default_factory=list)
    _counter: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __enter__(self) -> "Trace":
        _active.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _active.remove(self)
        self.events.sort(key=lambda e: e.seq)

    def _add(self, event: Event) -> None:
        with self._lock:          # the device's command processor reports from its own thread
            self._counter += 1
            event.seq = self._counter
            self.events.append(event)

    def select(self, layer: int | None = None, name: str | None = None) -> list[Event]:
        return [e for e in self.events if (layer is None or e.layer == layer) and (name is None or e.name == name)]

    def first(self, layer: int, name: str) -> Event:
        found = self.select(layer, name)
        if not found:
            raise LookupError(f"no layer-{layer} event named {name!r} in this trace")
        return found[0]


_active: list[Trace] = []


def enabled() -> bool:
    return bool(_active)


def emit(layer: int, name: str, sim_start_ns: float | None = None, sim_end_ns: float | None = None,
         **args) -> None:
    """Record an instant event in every open trace."""
    if not _active:
        return
    now, thread = time.perf_counter(), threading.get_ident()
    for t in list(_active):
        t._add(Event(layer, name, dict(args), now, now, sim_start_ns, sim_end_ns, thread=thread))


def span(layer: int, name: str, **args):
    """Record the host wall time of a block; the block may add arguments to the yielded dict. With no
    trace open it is a null context (ops open spans by the thousand)."""
    return _span(layer, name, args) if _active else nullcontext({})


def lazy_span(layer: int, name: str, arguments):
    """span() with its arguments made by `arguments()` only when a trace is open: an op's shapes and names as text
    cost more than a small op's work, and most ops run with no trace open."""
    return _span(layer, name, arguments()) if _active else nullcontext({})


@contextmanager
def _span(layer: int, name: str, args: dict):
    active = list(_active)
    events = [Event(layer, name, dict(args), time.perf_counter(), 0.0, thread=threading.get_ident())
              for _ in active]
    for t, e in zip(active, events, strict=True):
        t._add(e)
    extra: dict = {}
    try:
        yield extra
    finally:
        end = time.perf_counter()
        for e in events:
            e.wall_end = end
            e.args.update(extra)


class _CallableModule(types.ModuleType):
    """Lets `lapis.trace()` open a trace while `lapis.trace.emit` stays a module function."""

    def __call__(self) -> Trace:
        return Trace()


sys.modules[__name__].__class__ = _CallableModule
