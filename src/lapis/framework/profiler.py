"""Layer 5, `lapis.profiler`: torch.profiler's interface over the events every layer reports (lapis.trace).

    with lapis.profiler.profile(record_shapes=True) as prof:
        loss = model(x).sum(); loss.backward()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10))
    prof.export_chrome_trace("trace.json")          # open in Perfetto or chrome://tracing

A framework op is a Layer 5 event (every autograd Function's forward and backward, optimizer steps,
`matmul`, `to`, ...). A kernel belongs to the innermost op that launched it: its Layer 0 event
names the queue and packet index that Layer 3's launch event names too, and the launch happened on
the op's thread inside the op's wall time. Host times are wall times; device times are the
performance model's simulated times, on the device's own clock.
"""

import enum
import json
import os
from collections import defaultdict
from dataclasses import dataclass, field

from lapis import cuda, hip, trace
from lapis.trace import LAYER_NAMES, Event


class ProfilerActivity(enum.Enum):
    CPU = "cpu"
    CUDA = "cuda"


@dataclass
class FunctionEventAvg:
    """One row of key_averages(): an op (or a kernel) summed over its calls. Times in microseconds."""
    key: str
    count: int = 0
    cpu_time_total: float = 0.0
    self_cpu_time_total: float = 0.0
    device_time_total: float = 0.0
    self_device_time_total: float = 0.0
    input_shapes: str = ""
    is_kernel: bool = False

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def device_time(self) -> float:
        return self.device_time_total / self.count if self.count else 0.0

    cuda_time_total = property(lambda self: self.device_time_total)
    self_cuda_time_total = property(lambda self: self.self_device_time_total)


_SORT_KEYS = {"cpu_time_total", "self_cpu_time_total", "device_time_total", "self_device_time_total",
              "cuda_time_total", "self_cuda_time_total", "cpu_time", "device_time", "count"}


def _us(value: float) -> str:
    # torch's format: 12.345us, 1.234ms, 1.234s
    if value >= 1e6:
        return f"{value / 1e6:.3f}s"
    if value >= 1e3:
        return f"{value / 1e3:.3f}ms"
    return f"{value:.3f}us"


class EventList(list):
    """key_averages()'s rows, with torch's table(). An op's Self CUDA is the time of the kernels it launched
    itself; each kernel also has a row of its own, and the CUDA totals and percentages count those."""

    def table(self, sort_by: str | None = None, row_limit: int = 100, max_name_column_width: int = 55) -> str:
        if sort_by is not None and sort_by not in _SORT_KEYS:
            raise ValueError(f"sort_by must be one of {sorted(_SORT_KEYS)}, not {sort_by!r}")
        rows = sorted(self, key=lambda r: -getattr(r, sort_by)) if sort_by else list(self)
        rows = rows[:row_limit] if row_limit > 0 else rows
        self_cpu = sum(r.self_cpu_time_total for r in self) or 1.0
        device = sum(r.self_device_time_total for r in self if r.is_kernel)   # kernels' rows: the device's time
        self_dev = device or 1.0
        shapes = any(r.input_shapes for r in rows)
        head = ["Name", "Self CPU %", "Self CPU", "CPU total", "CPU time avg", "Self CUDA", "Self CUDA %",
                "CUDA total", "CUDA time avg", "# of Calls"] + (["Input Shapes"] if shapes else [])
        body = [[r.key[:max_name_column_width], f"{r.self_cpu_time_total / self_cpu:.2%}",
                 _us(r.self_cpu_time_total),
                 _us(r.cpu_time_total), _us(r.cpu_time), _us(r.self_device_time_total),
                 f"{r.self_device_time_total / self_dev:.2%}", _us(r.device_time_total), _us(r.device_time),
                 str(r.count)] + ([r.input_shapes] if shapes else []) for r in rows]
        return "\n".join([*text_table(head, body, rules=True),
                          f"Self CPU time total: {_us(sum(r.self_cpu_time_total for r in self))}",
                          f"Self CUDA time total: {_us(device)}", ""])


def text_table(headers: list[str], rows: list[list[str]], rules: bool = False) -> list[str]:
    """Aligned plain-text lines: the first column left-justified, the rest right; with `rules`, dashed
    lines around the header and under the body, as torch's profiler table has."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                                              strict=True)))
    if not rules:
        return [line(headers), *(line(r) for r in rows)]
    rule = "  ".join("-" * w for w in widths)
    return [rule, line(headers), rule, *(line(r) for r in rows), rule]


@dataclass
class _Op:
    event: Event
    children: list = field(default_factory=list)
    kernels: list = field(default_factory=list)      # (name, device ns) launched directly by this op


class profile:  # noqa: N801 - torch.profiler.profile's spelling
    """Record every layer's events while the block runs; the GPUs are synchronized at the end so the
    kernels the block launched are in the record (as torch.profiler flushes its device activity)."""

    def __init__(self, activities=None, record_shapes: bool = False, profile_memory: bool = False,
                 with_stack: bool = False):
        self.activities = set(activities or (ProfilerActivity.CPU, ProfilerActivity.CUDA))
        self.record_shapes = record_shapes
        self._trace: trace.Trace | None = None
        self._kernels: list[dict] | None = None

    def __enter__(self) -> "profile":
        self._trace, self._kernels = trace.Trace(), None
        self._trace.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            for api in (cuda, hip):
                if api.device_count():              # an API with no GPU simulated raises on synchronize
                    api.synchronize()
        finally:
            self._trace.__exit__(*exc)

    def events(self) -> list[Event]:
        if self._trace is None:
            raise RuntimeError("the profiler has not run: use it as `with profile() as prof:`")
        return self._trace.events

    # -- analysis ----------------------------------------------------------------------------------
    def kernels(self) -> list[dict]:
        """Each kernel the record holds: its Layer 0 event's values, with `name` from its launch and
        `device_ns` (simulated start to end). The record is fixed once the block ends, so this is worked
        out once."""
        if self._kernels is None:
            events = self.events()
            launches = launch_index(events)
            self._kernels = []
            for e in events:
                if e.layer == 0 and e.name == "kernel":
                    launch = launches.get(_packet(e))
                    name = launch.args["kernel"] if launch else f"kernel@{e.args['kernel_object']:#x}"
                    self._kernels.append({**e.args, "name": name, "device_ns": e.sim_end_ns - e.sim_start_ns,
                                          "launch": launch})
        return self._kernels

    def _ops(self) -> list[_Op]:
        """The Layer 5 events as trees per thread, each kernel hung on the innermost op that launched it."""
        roots: list[_Op] = []
        every: list[_Op] = []                                      # all of them, by start time
        by_thread: dict[int, list[_Op]] = defaultdict(list)       # each thread's stack of open ops
        for e in sorted((e for e in self.events() if e.layer == 5), key=lambda e: (e.wall_start, -e.wall_end)):
            op = _Op(e)
            every.append(op)
            stack = by_thread[e.thread]
            while stack and stack[-1].event.wall_end < e.wall_start:
                stack.pop()
            (stack[-1].children if stack else roots).append(op)
            stack.append(op)
        # innermost: the latest-starting op on the launch's thread whose wall time holds the launch
        for k in self.kernels():
            launch = k["launch"]
            if launch is None:
                continue
            holders = [op for op in every if op.event.thread == launch.thread
                       and op.event.wall_start <= launch.wall_start <= op.event.wall_end]
            if holders:
                holders[-1].kernels.append((k["name"], k["device_ns"]))       # the latest to start
        return roots

    def key_averages(self, group_by_input_shape: bool = False) -> EventList:
        rows: dict[tuple, FunctionEventAvg] = {}

        def visit(op: _Op) -> float:
            # returns the op's total device ns (its kernels and its children's)
            e = op.event
            shapes = str(e.args.get("input_shapes", "")) if self.record_shapes else ""
            key = (e.name, shapes if group_by_input_shape else "")
            row = rows.setdefault(key, FunctionEventAvg(e.name, input_shapes=shapes if group_by_input_shape else ""))
            wall_us = (e.wall_end - e.wall_start) * 1e6
            self_dev = sum(ns for _, ns in op.kernels)
            total_dev = self_dev + sum(visit(c) for c in op.children)
            row.count += 1
            row.cpu_time_total += wall_us
            row.self_cpu_time_total += wall_us - sum((c.event.wall_end - c.event.wall_start) * 1e6
                                                     for c in op.children)
            row.device_time_total += total_dev / 1e3
            row.self_device_time_total += self_dev / 1e3
            return total_dev
        for root in self._ops():
            visit(root)
        for k in self.kernels():
            row = rows.setdefault((k["name"], "kernel"), FunctionEventAvg(k["name"], is_kernel=True))
            row.count += 1
            row.device_time_total += k["device_ns"] / 1e3
            row.self_device_time_total += k["device_ns"] / 1e3
        return EventList(rows.values())

    # -- per instruction (lapis disasm) -----------------------------------------------------------------
    def listings(self) -> dict[str, dict]:
        """Per kernel: its instructions with execution counts summed over its launches and operand stalls
        averaged over them (weighted by executions), what `lapis disasm` annotates a listing with. Two
        codes under one name (two argument-type specializations) are `name` and `name#2`."""
        out: dict[str, dict] = {}
        for k in self.kernels():
            per = k.get("per_instruction")
            if per is None:
                continue
            key, n = k["name"], 1
            while key in out and out[key]["text"] != per["text"]:
                n += 1
                key = f"{k['name']}#{n}"
            entry = out.setdefault(key, {"name": k["name"], "profile": k["profile"], "registers": k["registers"],
                                         "launches": 0, "text": per["text"], "warp_executions": [0] * len(per["text"]),
                                         "thread_executions": [0] * len(per["text"]),
                                         "stall_weight": [0.0] * len(per["text"]),
                                         "stall_reasons": list(per["stall_reasons"])})
            entry["launches"] += 1
            for pc, (w, t, cyc) in enumerate(zip(per["warp_executions"], per["thread_executions"],
                                                 per["stall_cycles"], strict=True)):
                entry["warp_executions"][pc] += w
                entry["thread_executions"][pc] += t
                entry["stall_weight"][pc] += cyc * w
        for entry in out.values():
            weights = entry.pop("stall_weight")
            entry["stall_cycles"] = [round(wt / w, 2) if w else 0.0 for wt, w in zip(weights, entry["warp_executions"],
                                                                                    strict=True)]
        return out

    def save(self, path: str) -> None:
        """The record `lapis disasm` reads: every kernel's per-instruction counts and stalls (JSON)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"producer": "lapis.profiler", "kernels": self.listings()}, f)

    # -- the roofline ----------------------------------------------------------------------------------
    def roofline(self, path: str, title: str | None = None) -> list[dict]:
        """Draw the recorded kernels against their device's roofs (PNG, SVG or PDF by `path`'s suffix, with
        matplotlib): x is arithmetic intensity (FLOPs per DRAM byte, or per L2 byte for a kernel whose data
        all hit in L2), y achieved FLOP/s; the roofs are the DRAM and L2 bandwidth lines and the FP32 and
        matrix peaks. Returns the points plotted."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        points = roofline_points(self.kernels())
        if not points:
            raise RuntimeError("no kernels in this profile to plot")
        fig, ax = plt.subplots(figsize=(8, 5.5))
        for profile in sorted({p["profile"] for p in points}):
            peaks = device_peaks(profile)
            mine = [p for p in points if p["profile"] == profile]
            lo = min(min(p["intensity"] for p in mine) / 4, 0.01)
            hi = max(max(p["intensity"] for p in mine) * 4, peaks.peak_matrix_flops / peaks.memory_bandwidth * 4)
            xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
            for peak, bandwidth, style, label in (
                    (peaks.peak_fp32_flops, peaks.memory_bandwidth, "-", "FP32, DRAM"),
                    (peaks.peak_matrix_flops, peaks.memory_bandwidth, "--", "matrix, DRAM"),
                    (peaks.peak_fp32_flops, peaks.l2_bandwidth, ":", "FP32, L2")):
                ax.plot(xs, [min(peak, x * bandwidth) for x in xs], style,
                        label=f"{profile} {label} roof ({peak / 1e12:.0f} TFLOP/s, {bandwidth / 1e12:.1f} TB/s)")
            for kind, marker in (("compute", "o"), ("memory", "s"), ("latency", "^")):
                kinds = [p for p in mine if p["bound"] == kind]
                if kinds:
                    ax.scatter([p["intensity"] for p in kinds], [p["flops_per_s"] for p in kinds], marker=marker,
                               label=f"{profile} kernels, {kind}-bound", zorder=3)
            for p in sorted(mine, key=lambda p: -p["time_ns"])[:8]:
                ax.annotate(p["name"], (p["intensity"], p["flops_per_s"]), fontsize=7, xytext=(4, 4),
                            textcoords="offset points")
        ax.set(xscale="log", yscale="log",
               xlabel="arithmetic intensity (FLOP / DRAM byte; per L2 byte where nothing reached DRAM)",
               ylabel="achieved FLOP/s (simulated)", title=title or "roofline of the profiled kernels")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return points

    # -- the Chrome trace event format ----------------------------------------------------------------
    def export_chrome_trace(self, path: str) -> None:
        """Write the record as a Chrome trace (JSON object format): one process for the host, a track
        per layer in wall time, and one process per GPU whose tracks (kernels, copies, PCIe) are in
        simulated time; a flow arrow joins each launch to its kernel."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(chrome_trace(self.events()), f)


COMPUTE_LIMITERS = {"issue", "alu", "fma", "fp64", "sfu", "matrix"}
MEMORY_LIMITERS = {"lsu", "shared", "l2", "far", "dram"}


def device_peaks(profile: str):
    """The device properties (Layer 3) of a GPU with this profile: its peak FLOP/s and bandwidth."""
    for api in (cuda, hip):
        for i in range(api.device_count()):
            props = api.get_device_properties(i)
            if props.profile == profile:
                return props
    raise LookupError(f"no GPU with profile {profile!r} in this process")


def _packet(e: Event) -> tuple:
    """The (queue, packet index) a launch or kernel event names: what joins a Layer 3 launch to its kernel."""
    return e.args.get("queue"), e.args.get("packet_index")


def launch_index(events: list[Event]) -> dict[tuple, Event]:
    """Layer 3's launch events by the queue and packet index of the dispatch they queued."""
    return {_packet(e): e for e in events if e.layer == 3 and e.name == "launch"}


def kernel_groups(kernels: list[dict]) -> list[dict]:
    """The kernels summed per name, launch shape and device profile, the longest simulated time first:
    calls, time, FLOPs (and matrix FLOPs), DRAM and L2 bytes, registers, shared memory, the performance
    model's limiter and whether that makes the kernel compute-, memory- or latency-bound."""
    groups = defaultdict(list)
    for k in kernels:
        groups[(k["name"], tuple(k["grid"]), tuple(k["block"]), k["profile"])].append(k)
    out = []
    for (name, grid, block, profile), ks in groups.items():
        limiter = ks[0]["limiter"]
        out.append({"name": name, "grid": grid, "block": block, "profile": profile, "calls": len(ks),
                    "time_ns": sum(k["duration_ns"] for k in ks), "flops": sum(k["flops"] for k in ks),
                    "matrix_flops": sum(k["flops_by_precision"].get("matrix", 0) for k in ks),
                    "dram_bytes": sum(k["dram_bytes"] for k in ks),
                    "l2_bytes": sum(k["global_sectors"] for k in ks) * 32, "registers": ks[0]["registers"],
                    "shared_bytes": ks[0]["shared_bytes"], "limiter": limiter,
                    "bound": "compute" if limiter in COMPUTE_LIMITERS else
                    "memory" if limiter in MEMORY_LIMITERS else "latency"})
    return sorted(out, key=lambda g: -g["time_ns"])


def roofline_points(kernels: list[dict]) -> list[dict]:
    """One point per kernel and launch shape (kernel_groups): FLOPs per DRAM byte and achieved FLOP/s over
    the kernels' simulated duration."""
    points = []
    for g in kernel_groups(kernels):
        if not g["flops"] or not g["time_ns"]:
            continue                                  # a copy or fill: no FLOPs to place on the chart
        # intensity over DRAM bytes; a kernel whose data all hit in L2 is placed by its L2 traffic
        level, moved = ("dram", g["dram_bytes"]) if g["dram_bytes"] else ("l2", max(g["l2_bytes"], 1))
        points.append({**g, "level": level, "intensity": g["flops"] / moved,
                       "flops_per_s": g["flops"] / (g["time_ns"] * 1e-9)})
    return points


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if hasattr(value, "item"):                     # numpy scalars
        return value.item()
    return str(value)


DEVICE_TRACKS = {"kernel": 1, "copy": 2, "pcie": 3}


def chrome_trace(events: list[Event]) -> dict:
    """The trace event format's JSON object for a list of events (see export_chrome_trace)."""
    host = os.getpid()
    t0 = min((e.wall_start for e in events), default=0.0)
    out = [{"ph": "M", "name": "process_name", "pid": host, "tid": 0, "args": {"name": "host (wall time)"}},
           {"ph": "M", "name": "process_sort_index", "pid": host, "tid": 0, "args": {"sort_index": 0}}]
    for layer, name in LAYER_NAMES.items():
        out.append({"ph": "M", "name": "thread_name", "pid": host, "tid": layer,
                    "args": {"name": f"L{layer} {name}"}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": host, "tid": layer,
                    "args": {"sort_index": 5 - layer}})
    devices: dict[str, int] = {}
    launches = launch_index(events)
    for e in events:
        # the per-instruction arrays are for `lapis disasm` (profile.save), not for a timeline
        args = _jsonable({k: v for k, v in e.args.items() if k != "per_instruction"})
        if e.sim_start_ns is not None:                       # the device timeline, in simulated time
            device = str(e.args.get("device", "gpu"))
            if device not in devices:
                pid = devices[device] = host + 1 + len(devices)
                out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                            "args": {"name": f"{device} (simulated time)"}})
                out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                            "args": {"sort_index": len(devices)}})
                for track, tid in DEVICE_TRACKS.items():
                    out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": track}})
            pid, tid = devices[device], DEVICE_TRACKS.get(e.name, len(DEVICE_TRACKS) + 1)
            end = e.sim_end_ns if e.sim_end_ns is not None else e.sim_start_ns
            ts = e.sim_start_ns / 1e3
            launch = launches.get(_packet(e)) if e.name == "kernel" else None
            name = launch.args["kernel"] if launch is not None else e.name
            out.append({"ph": "X", "name": name, "cat": f"L{e.layer}", "pid": pid, "tid": tid, "ts": ts,
                        "dur": max(end - e.sim_start_ns, 0) / 1e3, "args": args})
            if launch is not None:
                flow = {"name": "launch", "cat": "flow", "id": e.seq}
                out.append({**flow, "ph": "s", "pid": host, "tid": 3, "ts": (launch.wall_start - t0) * 1e6})
                out.append({**flow, "ph": "f", "bp": "e", "pid": pid, "tid": tid, "ts": ts})
            continue
        ts = (e.wall_start - t0) * 1e6
        if e.wall_end > e.wall_start:
            out.append({"ph": "X", "name": e.name, "cat": f"L{e.layer}", "pid": host, "tid": e.layer, "ts": ts,
                        "dur": (e.wall_end - e.wall_start) * 1e6, "args": args})
        else:
            out.append({"ph": "i", "s": "t", "name": e.name, "cat": f"L{e.layer}", "pid": host, "tid": e.layer,
                        "ts": ts, "args": args})
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"producer": "lapis.profiler", "clocks": "host: wall time; GPUs: simulated device time"}}

__all__ = ["ProfilerActivity", "FunctionEventAvg", "EventList", "text_table", "profile", "device_peaks",
           "launch_index", "kernel_groups", "roofline_points", "chrome_trace"]
