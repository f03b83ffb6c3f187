"""The figures the docs quote about the demo's call agree with a traced run of it (docs/facts.py)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow                 # a subprocess each: `make test-fast` leaves them out

DOCS = Path(__file__).resolve().parent.parent / "docs"
_spec = importlib.util.spec_from_file_location("facts", DOCS / "facts.py")
facts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(facts)


@pytest.fixture(scope="module")
def demo():
    # the demo's run in a process of its own (a fresh memory pool, as the demo has)
    out = subprocess.run([sys.executable, str(DOCS / "facts.py"), "--json"], capture_output=True, text=True,
                         check=True, timeout=300)
    return json.loads(out.stdout)


def test_every_marked_figure_agrees_with_the_demo_run(demo):
    assert facts.disagreements(demo) == []


def test_the_walkthroughs_mark_their_figures(demo):
    marked = {page.name: {name for name, _, _ in facts.marks(page.read_text())} for page in DOCS.glob("*.md")}
    # each layer page's walkthrough quotes the run's own figures, marked so they are checked
    for page, names in {"layer0-hardware.md": {"registers", "shared_bytes", "time_us", "limiter"},
                        "layer2-runtime.md": {"kernarg_bytes", "header", "work_items"},
                        "layer3-programming-interface.md": {"kernarg_bytes"},
                        "layer4-libraries.md": {"registers", "shared_bytes", "bank_conflicts"}}.items():
        assert names <= marked[page], f"{page} quotes unmarked figures: {names - marked[page]}"
    assert set().union(*marked.values()) <= set(demo)


def test_the_check_finds_a_stale_figure(demo):
    stale = "uses 1<!--fact:registers--> registers"
    assert [name for name, shown, _ in facts.marks(stale)] == ["registers"]
    assert facts.rewrite(stale, demo) == f"uses {demo['registers']}<!--fact:registers--> registers"
    with pytest.raises(KeyError, match="no fact named 'nonsense'"):
        facts.rewrite("7<!--fact:nonsense-->", demo)


def test_the_profile_table_of_layer0_is_the_profiles():
    """docs/layer0-hardware.md's table of profile fields quotes the latencies, the launch cost and the DRAM
    efficiency the model is calibrated with (docs/performance-model.md): each row as the profiles have it."""
    from lapis.hardware.profiles import PROFILES
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:5]]
            for line in (DOCS / "layer0-hardware.md").read_text().splitlines() if line.startswith("| ")}
    for column, p in enumerate(PROFILES[name] for name in ("h200", "mi300x", "teaching")):
        far = p.far_cache_latency_cycles if p.far_cache_bytes else "-"
        latencies = (p.l1_latency_cycles, p.l2_latency_cycles, far, p.dram_latency_cycles, p.shared_latency_cycles)
        assert rows["l1 / l2 / far / dram / shared latency (cycles)"][column] == " / ".join(map(str, latencies))
        assert rows["schedulers_per_unit, kernel_launch_ns"][column] == \
            f"{p.schedulers_per_unit}, {p.kernel_launch_ns:.0f}"
        assert rows["memory_bytes, memory_bandwidth, dram_efficiency"][column].endswith(f", {p.dram_efficiency}")


def test_the_real_h200_table_is_the_measured_runs():
    """docs/performance-model.md's "Checked on a real H200" quotes benchmarks/measured/h200.json: each row's real
    column is the range of the runs' figures, its lapis column the calibration table's h200 value, and the text's
    figures (uint64 chase, graph-replayed kernels, torch.matmul) are the file's."""
    measured = json.loads((DOCS.parent / "benchmarks" / "measured" / "h200.json").read_text())
    text = (DOCS / "performance-model.md").read_text()
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:4]]
            for line in text.split("## Checked on a real H200")[1].splitlines() if line.startswith("| ")}
    calibration = {line.split("|")[1].strip(): line.split("|")[2].strip()
                   for line in text.split("## Calibration against real GPUs")[1].splitlines() if line.startswith("| ")}
    # this table's row -> (the figure's name in the runs, the calibration table's row)
    figures = {"L1 hit latency, cycles": ("L1 hit latency", "L1 hit latency, cycles"),
               "L2 hit latency, near, cycles": ("L2 hit latency, near", "L2 hit latency, cycles"),
               "L2 hit latency, far, cycles": ("L2 hit latency, far", "L2 far partition / Infinity Cache, cycles"),
               "DRAM latency (cold, 120 MiB), cycles": ("DRAM latency", "DRAM latency, cycles"),
               "shared-memory load latency, cycles": ("shared-memory load latency",
                                                      "shared-memory load latency, cycles"),
               "BabelStream copy, TB/s": ("BabelStream copy", "BabelStream copy, TB/s"),
               "BabelStream triad, TB/s": ("BabelStream triad", "BabelStream triad, TB/s"),
               "DRAM read past the caches, TB/s": ("DRAM read, > 100 MB", "DRAM read past the caches, TB/s"),
               "L2 read, 16 MiB, TB/s": ("L2 read, 16 MiB working set", "L2 read, 16 MiB, TB/s"),
               "FP32 FMA throughput, TFLOP/s": ("FP32 FMA throughput", "FP32 FMA throughput, TFLOP/s"),
               "FFMA dependent latency, cycles": ("FFMA dependent latency", "FFMA dependent latency, cycles")}
    assert rows.pop("figure (this suite's kernel)") == ["lapis `h200`", "the real H200, numba.cuda"]
    assert set(rows) == set(figures)

    def span(values) -> str:
        return f"{min(values):g}-{max(values):g}" if len(set(values)) > 1 else f"{values[0]:g}"

    for row, (name, calibrated) in figures.items():
        runs = [run[name] for run in measured["micro_runs"] if name in run]
        assert rows[row] == [calibration[calibrated], span(runs)], row
    uint64 = measured["chase_by_index_type"]["uint64"]
    assert f"{uint64[0]}, {uint64[1]} and {uint64[3]}" in text
    assert f"{span(measured['graph_kernel_us'])} us each" in text
    for size, tflops in measured["matmul_tflops"].items():
        assert f"{size}: " + " / ".join(f"{v:g}" for v in tflops.values()) in text


def test_micro_sets_lapis_beside_the_measured_runs():
    """`micro.py --against` reads a file of real-GPU runs and prints each figure's range and lapis's ratio to its
    middle run."""
    sys.path.insert(0, str(DOCS.parent / "benchmarks"))
    import micro
    runs, curve = micro.measured(str(DOCS.parent / "benchmarks" / "measured" / "h200.json"))
    assert len(runs) == 3 and curve[0][0] == 4096
    lines = micro.against({"L1 hit latency": 38.1, "FP32 FMA throughput": 56.3, "not measured": 1.0}, runs)
    assert len(lines) == 3 and "66.7-66.9" in lines[1] and lines[1].endswith(f"{38.1 / 66.7:6.2f}")
    assert lines[2].split()[-2:] == ["43.7", f"{56.3 / 43.7:.2f}"]
