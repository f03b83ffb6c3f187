"""Layer 5: `lapis.utils.benchmark`, torch.utils.benchmark's place: `Timer` and the `Measurement` it returns.

    t = lapis.utils.benchmark.Timer(stmt="a @ b", globals={"a": a, "b": b})
    m = t.timeit(50)                        # or t.blocked_autorange(), t.adaptive_autorange()
    print(m.median, m)                      # seconds per run; a summary

torch's Timer runs a statement in blocks of `number` runs and times each block by the host's clock, after
synchronizing the GPU. lapis's GPU is simulated, so the host's clock would say how fast the simulator runs, not
how fast the GPU would. A block that queues kernels on the current accelerator device is therefore timed by that
device's clock, between two events recorded around the block: the simulated time `lapis.cuda.Event.elapsed_time`
and the profiler report, what CUDA events measure on a real GPU. A block that queues none (work on the cpu
device) is timed by the host's clock, as torch times it. `timer=` (a function returning seconds) picks a clock
for every block instead.

`blocked_autorange` and `adaptive_autorange` decide how long to keep measuring by the host's clock: `min_run_time`
and `max_run_time` are wall seconds here (a 1024^3 product simulates in about 0.4 s and takes 8 us of device time,
so measuring until 0.2 s of device time would take hours).

Left out: C++ statements (`language="c++"`), Callgrind, `Compare` and the fuzzers.
"""

import math
import timeit

import numpy as np

from lapis.framework.device import device as _device

__all__ = ["Measurement", "Timer"]

_UNITS = ((1e-9, "ns"), (1e-6, "us"), (1e-3, "ms"), (1.0, "s"))


def _unit(seconds: float) -> tuple[float, str]:
    """The largest of ns, us, ms and s that `seconds` is at least one of."""
    scale, name = _UNITS[0]
    for s, n in _UNITS:
        if seconds >= s:
            scale, name = s, n
    return scale, name


class Measurement:
    """The times of one statement's blocks: `raw_times` (seconds per block of `number_per_run` runs), and per run
    `times`, `mean`, `median` and `iqr`, as torch.utils.benchmark.Measurement."""

    def __init__(self, number_per_run: int, raw_times: list[float], stmt: str, label=None, sub_label=None,
                 description=None, env=None, num_threads: int = 1, clock: str = "device"):
        self.number_per_run, self.raw_times = number_per_run, list(raw_times)
        self.stmt, self.label, self.sub_label, self.description, self.env = stmt, label, sub_label, description, env
        self.num_threads = num_threads
        self.clock = clock          # "device" (the simulated GPU's), "host", or "timer" (the one Timer was given)

    @property
    def times(self) -> list[float]:
        return [t / self.number_per_run for t in self.raw_times]

    @property
    def mean(self) -> float:
        return float(np.mean(self.times))

    @property
    def median(self) -> float:
        return float(np.median(self.times))

    @property
    def iqr(self) -> float:
        return float(np.percentile(self.times, 75) - np.percentile(self.times, 25))

    @property
    def has_warnings(self) -> bool:
        """torch's warning: an IQR over a tenth of the median, from at least four blocks."""
        return len(self.times) >= 4 and self.iqr > 0.1 * self.median

    @property
    def title(self) -> str:
        return " ".join(str(part) for part in (self.label, self.sub_label) if part) or self.stmt

    def __repr__(self) -> str:
        scale, unit = _unit(self.median)
        lines = [f"<lapis.utils.benchmark.Measurement object at {id(self):#x}>"]
        if self.label or self.sub_label:
            lines.append(self.title)
        lines.append(self.description or self.stmt)
        if len(self.times) > 1:
            low, high = np.percentile(self.times, 25) / scale, np.percentile(self.times, 75) / scale
            lines += [f"  Median: {self.median / scale:.2f} {unit}",
                      f"  IQR:    {self.iqr / scale:.2f} {unit} ({low:.2f} to {high:.2f})"]
        else:
            lines.append(f"  {self.median / scale:.2f} {unit}")
        measurements = f"{len(self.times)} measurement{'s' if len(self.times) > 1 else ''}"
        lines.append(f"  {measurements}, {self.number_per_run} runs per measurement, {self.num_threads} thread"
                     f"{'s' if self.num_threads > 1 else ''}, {self.clock} clock")
        if self.has_warnings:
            lines.append(f"  WARNING: Interquartile range is {self.iqr / self.median:.1%} of the median measurement.")
        return "\n".join(lines)


class Timer:
    """torch.utils.benchmark.Timer(stmt, setup, global_setup, timer, globals, label, sub_label, description, env,
    num_threads, language): times `stmt` (a string run in `globals`, or a callable) after `setup`, by the clock the
    module docstring describes. `num_threads` is recorded, not applied (lapis's host code is single-threaded)."""

    def __init__(self, stmt="pass", setup="pass", global_setup: str = "", timer=None, globals=None, label=None,
                 sub_label=None, description=None, env=None, num_threads: int = 1, language="python"):
        if str(getattr(language, "value", language)).lower() not in ("python", "py"):
            raise ValueError(f"lapis.utils.benchmark.Timer times Python statements only, not language={language!r}")
        self._names = dict(globals or {})
        if global_setup:
            exec(global_setup, self._names)
        self._host = timeit.Timer(stmt, setup, timer=timeit.default_timer, globals=self._names)
        self._chosen = None if timer is None else timeit.Timer(stmt, setup, timer=timer, globals=self._names)
        self._stmt = stmt if isinstance(stmt, str) else getattr(stmt, "__name__", repr(stmt))
        self._about = dict(label=label, sub_label=sub_label, description=description, env=env,
                           num_threads=num_threads)

    def _block(self, number: int) -> tuple[float, float, str]:
        """One block of `number` runs: (its time, the wall time it took to measure, the clock that timed it:
        "device", "host" or "timer"). Kernels are queued asynchronously, so a GPU block's wall time runs to the end
        of the GPU's work."""
        start = timeit.default_timer()
        if self._chosen is not None:
            time = self._chosen.timeit(number)
            return time, timeit.default_timer() - start, "timer"
        api = _device("cuda").api
        if not api.is_available():
            time = self._host.timeit(number)
            return time, timeit.default_timer() - start, "host"
        context = api.current_context(api.current_device())
        launched = context.launches
        begin, end = api.Event(enable_timing=True), api.Event(enable_timing=True)
        begin.record()
        host = self._host.timeit(number)
        end.record()
        end.synchronize()                           # as torch's timer synchronizes the GPU after a block
        if context.launches == launched:           # the events' own cost is no part of the statement's
            return host, host, "host"
        return begin.elapsed_time(end) / 1e3, timeit.default_timer() - start, "device"

    def _measurement(self, number: int, times: list[float], clock: str) -> Measurement:
        return Measurement(number, times, self._stmt, clock=clock, **self._about)

    def timeit(self, number: int = 1000000) -> Measurement:
        """One block of `number` runs (after a warm-up block of number // 100, at least 2), as torch's timeit."""
        self._block(max(number // 100, 2))
        time, _, clock = self._block(number)
        return self._measurement(number, [time], clock)

    def _block_size(self, min_run_time: float) -> int:
        """Runs per block: tenfold until a block takes a thousandth of `min_run_time` of wall time (or all of
        it). The first blocks are the warm-up."""
        number = 1
        while True:
            _, wall, _ = self._block(number)
            if wall >= min_run_time / 1000 or number * 10 > 2147483647:
                return number
            number *= 10

    def _loop(self, number: int, enough, min_run_time: float, max_run_time: float | None,
              callback) -> Measurement:
        """Blocks of `number` runs until `min_run_time` of wall time has passed and `enough(times)` holds, or
        `max_run_time` has."""
        times, clocks, spent = [], set(), 0.0
        while True:
            time, wall, clock = self._block(number)
            times.append(time)
            clocks.add(clock)
            spent += wall
            if callback is not None:
                callback(number, time)
            if spent >= min_run_time and enough(times):
                break
            if max_run_time is not None and spent >= max_run_time:
                break
        # A block that launched nothing beside ones that did: mixed clocks would give meaningless statistics.
        if len(clocks) > 1:
            raise RuntimeError(f"{self._stmt!r} queued GPU work in some blocks and none in others: its times "
                               "would mix the simulated GPU's clock and the host's; pass timer= to pick one")
        return self._measurement(number, times, clocks.pop())

    def blocked_autorange(self, callback=None, min_run_time: float = 0.2) -> Measurement:
        """Blocks until `min_run_time` wall seconds have passed (at least one block), as torch's."""
        number = self._block_size(min_run_time)
        return self._loop(number, lambda times: True, min_run_time, None, callback)

    def adaptive_autorange(self, threshold: float = 0.1, *, min_run_time: float = 0.01, max_run_time: float = 10.0,
                           callback=None) -> Measurement:
        """Blocks until the IQR is under `threshold` of the median (from at least three blocks) or `max_run_time`
        wall seconds have passed, as torch's."""
        number = self._block_size(min_run_time)

        def enough(times) -> bool:
            if len(times) < 3:
                return False
            median = float(np.median(times))
            spread = float(np.percentile(times, 75) - np.percentile(times, 25))
            return median > 0 and spread / median < threshold and math.isfinite(median)
        return self._loop(number, enough, min_run_time, max_run_time, callback)
