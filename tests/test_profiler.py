"""lapis.profiler: torch.profiler's table and Chrome trace over every layer's events, checked against the
Layer 0 kernel events and the trace event format."""

import json
from collections import Counter

import pytest

import lapis
from lapis import nn


@pytest.fixture(scope="module")
def prof():
    lapis.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4)).cuda()
    opt = lapis.optim.Adam(net.parameters())
    x = lapis.randn(8, 32, device="cuda")
    net(x).sum().backward()                       # compile outside the record
    lapis.cuda.empty_cache()                      # the step's tensors then come from the driver (ALLOC_MEMORY_OF_GPU)
    with lapis.profiler.profile(record_shapes=True) as p:
        loss = net(x).sum()
        loss.backward()
        opt.step()
    return p


def test_kernel_rows_match_the_layer_0_kernel_events(prof):
    kernels = [e for e in prof.events() if e.layer == 0 and e.name == "kernel"]
    assert kernels, "the profile recorded no kernels"
    rows = {r.key: r for r in prof.key_averages() if r.is_kernel}
    named = Counter(k["name"] for k in prof.kernels())
    assert sum(named.values()) == len(kernels) and "gemm_kernel" in named
    for name, count in named.items():
        assert rows[name].count == count
        want = sum(k["device_ns"] for k in prof.kernels() if k["name"] == name) / 1e3
        assert rows[name].device_time_total == pytest.approx(want)
    total_us = sum((e.sim_end_ns - e.sim_start_ns) for e in kernels) / 1e3
    assert sum(r.self_device_time_total for r in rows.values()) == pytest.approx(total_us)


def test_ops_own_their_kernels_and_totals_include_children(prof):
    averages = {r.key: r for r in prof.key_averages()}
    matmul = averages["MatMul"]
    # two Linear forwards, one addmm each (the gemm adds the bias as it writes), and backward's products: dW of
    # both layers, dX of the second (x needs no grad)
    assert averages["AddMm"].count == 2 and averages["AddMm"].self_device_time_total > 0
    assert matmul.count == 3 and matmul.self_device_time_total > 0
    assert averages["matmul"].device_time_total >= matmul.device_time_total  # matmul() holds MatMul
    step = averages["Optimizer.step#Adam.step"]
    # the fused Adam kernels are the step's own; its first call also fills the moments (zeros_like)
    assert step.count == 1 and step.self_device_time_total == pytest.approx(averages["adam_kernel"].device_time_total)
    assert step.device_time_total > step.self_device_time_total
    for r in averages.values():
        assert r.device_time_total >= r.self_device_time_total - 1e-9 and r.cpu_time_total >= r.self_cpu_time_total
    ops_self = sum(r.self_device_time_total for r in averages.values() if not r.is_kernel)
    assert ops_self <= sum(r.self_device_time_total for r in averages.values() if r.is_kernel) + 1e-6
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=5)
    lines = table.splitlines()
    assert lines[1].split()[:3] == ["Name", "Self", "CPU"] and "Self CUDA time total" in table
    assert len([ln for ln in lines if ln and not ln.startswith("-") and "total:" not in ln]) == 6  # head + 5 rows
    with pytest.raises(ValueError, match="sort_by"):
        prof.key_averages().table(sort_by="nonsense")


def validate_chrome_trace(doc: dict) -> None:
    """The Trace Event Format's rules for what lapis writes: the JSON object form, phases X (with a
    non-negative dur), i (with a scope), M (metadata with args), s/f (flows sharing an id)."""
    assert isinstance(doc["traceEvents"], list) and doc.get("displayTimeUnit") in ("ms", "ns")
    flows = Counter()
    for ev in doc["traceEvents"]:
        assert ev["ph"] in {"X", "i", "M", "s", "f"}, ev
        assert isinstance(ev["name"], str) and isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        if ev["ph"] == "M":
            assert ev["name"] in {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}
            assert isinstance(ev["args"], dict)
            continue
        assert isinstance(ev["ts"], int | float) and ev["ts"] >= 0
        if ev["ph"] == "X":
            assert isinstance(ev["dur"], int | float) and ev["dur"] >= 0
        if ev["ph"] == "i":
            assert ev["s"] in {"g", "p", "t"}
        if ev["ph"] in "sf":
            flows[(ev["id"], ev["ph"])] += 1
        json.dumps(ev.get("args", {}))
    starts = {i for i, ph in flows if ph == "s"}
    assert starts == {i for i, ph in flows if ph == "f"} and starts


def test_op_spans_carry_their_arguments_when_traced_and_cost_nothing_when_not():
    x, w, weight, bias = lapis.ones(4, 8), lapis.ones(8, 3), lapis.ones(3, 8), lapis.ones(3)
    with lapis.trace() as t:
        lapis.zeros(2, 3)
        x @ w
        nn.functional.linear(x, weight, bias)
        x.to(lapis.float64)
    spans = {}
    for e in t.events:
        if e.layer == 5:
            spans.setdefault(e.name, e.args)
    assert spans["full"]["shape"] == [2, 3] and spans["full"]["device"] == "cpu"
    assert spans["matmul"]["a_shape"] == [4, 8] and spans["matmul"]["b_shape"] == [8, 3]
    assert spans["linear"]["weight_shape"] == [3, 8]
    assert spans["to"]["dtype"] == "lapis.float64" and spans["to"]["shape"] == [4, 8]
    made = []
    with lapis.trace.lazy_span(5, "untraced", lambda: made.append(1) or {}):
        pass
    assert made == []                             # no trace open: the arguments are never made


def test_chrome_trace_has_a_track_per_layer_and_the_device_timeline(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    validate_chrome_trace(doc)
    names = {ev["args"]["name"] for ev in doc["traceEvents"] if ev["ph"] == "M" and ev["name"] == "thread_name"}
    assert {"L5 framework", "L4 libraries", "L3 programming interface", "L2 runtime", "L1 driver",
            "L0 hardware", "kernel", "pcie"} <= names
    processes = [ev["args"]["name"] for ev in doc["traceEvents"] if ev["name"] == "process_name"]
    assert "host (wall time)" in processes and any("simulated time" in p for p in processes)
    device_kernels = [ev for ev in doc["traceEvents"] if ev["ph"] == "X" and ev.get("cat") == "L0"
                      and ev["tid"] == 1]
    assert len(device_kernels) == len(prof.kernels()) and any(ev["name"] == "gemm_kernel" for ev in device_kernels)
    l1 = {ev["name"] for ev in doc["traceEvents"] if ev.get("cat") == "L1"}
    assert {"doorbell", "interrupt", "ALLOC_MEMORY_OF_GPU"} <= l1                 # driver commands and interrupts
    layers = {ev["cat"] for ev in doc["traceEvents"] if ev["ph"] in "Xi"}
    assert {"L5", "L4", "L3", "L2", "L1", "L0"} <= layers                 # every layer reported something


@pytest.mark.parametrize("suffix,magic", [("png", b"\x89PNG"), ("svg", b"<?xml")])
def test_roofline_places_kernels_under_their_roofs(tmp_path, suffix, magic):
    a = lapis.randn(256, 256, device="cuda")
    (a @ a + a).cpu()
    with lapis.profiler.profile() as p:
        (a @ a + a).cpu()
    path = tmp_path / f"roofline.{suffix}"
    points = p.roofline(str(path))
    assert path.read_bytes().startswith(magic)
    by_name = {q["name"]: q for q in points}
    gemm, add = by_name["gemm_kernel"], by_name["binary_kernel"]
    assert gemm["intensity"] > 10 * add["intensity"]                # a matmul reuses; an add streams
    props = lapis.cuda.get_device_properties(0)
    for q in points:
        k = [k for k in p.kernels() if k["name"] == q["name"]]
        assert q["flops"] == sum(x["flops"] for x in k) and q["dram_bytes"] == sum(x["dram_bytes"] for x in k)
        moved = q["dram_bytes"] if q["level"] == "dram" else q["l2_bytes"]
        assert q["intensity"] == pytest.approx(q["flops"] / moved)
        bandwidth = props.memory_bandwidth if q["level"] == "dram" else props.l2_bandwidth
        assert q["flops_per_s"] <= min(props.peak_fp32_flops, q["intensity"] * bandwidth) * 1.001   # under its roof


# -- lapis.utils.benchmark: torch.utils.benchmark.Timer over the simulated clock ---------------------------------
def test_a_timer_times_gpu_work_by_the_device_clock_as_cuda_events_do():
    from lapis.utils import benchmark
    x, y = lapis.ones(4096, device="cuda"), lapis.ones(4096, device="cuda")
    x + y                                                   # compiled outside the timing
    start, end = lapis.cuda.Event(enable_timing=True), lapis.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        x + y
    end.record()
    three = start.elapsed_time(end) / 1e3                   # seconds of simulated time for three adds
    m = benchmark.Timer("x + y", globals={"x": x, "y": y}, label="add").timeit(3)
    assert (m.clock, m.number_per_run, len(m.raw_times)) == ("device", 3, 1)
    assert m.raw_times[0] == pytest.approx(three, rel=0.02) and m.median == pytest.approx(three / 3, rel=0.02)
    assert 1e-7 < m.median < 1e-4                           # microseconds, not the simulator's milliseconds
    assert "add" in repr(m) and "3 runs per measurement" in repr(m) and "device clock" in repr(m)


def test_a_timer_times_cpu_work_by_the_host_clock_and_takes_torch_s_arguments():
    from lapis.utils import benchmark
    a = lapis.ones(64, 64)
    m = benchmark.Timer(stmt="a @ a", setup="b = 1", globals={"a": a}).blocked_autorange(min_run_time=0.05)
    assert m.clock == "host" and m.number_per_run >= 1 and len(m.raw_times) >= 2 and 0 < m.median < 0.01
    calls = []

    def fake_clock():                                       # timer=: every block is 2 fake seconds long
        calls.append(1)
        return 2.0 * len(calls)
    m = benchmark.Timer(lambda: None, timer=fake_clock).adaptive_autorange(min_run_time=0, max_run_time=1e9)
    assert m.clock == "timer" and len(m.times) == 3 and m.raw_times == [2.0, 2.0, 2.0] and m.iqr == 0
    with pytest.raises(ValueError, match="Python statements only"):
        benchmark.Timer("a", language="c++")
