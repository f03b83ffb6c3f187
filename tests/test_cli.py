"""The `lapis` command: `demo` (the seed program's trip through the six layers, printed from the trace),
`trace`, `profile` and `smi`, their output parsed."""

import io
import json
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from lapis import isa
from lapis.cli import main, run_demo


def demo_text(device: str, n: int) -> tuple[str, dict]:
    buf = io.StringIO()
    result = run_demo(device, n, Console(file=buf, width=200, highlight=False, soft_wrap=True))
    return buf.getvalue(), result


def test_demo_prints_every_layer_with_real_values():
    text, result = demo_text("cuda", 128)
    assert result["ok"] and result["max_error"] < 1e-3
    assert "Calculation complete. Result shape: lapis.Size([128, 128])" in text
    positions = [text.index(f"Layer {n} ·") for n in (5, 4, 3, 2, 1, 0)]
    assert positions == sorted(positions)                                   # top to bottom
    assert "lapis.matmul(A, B): A [128, 128] lapis.float32" in text and "cuda:0" in text
    assert re.search(r"sgemm\(transa=N, transb=N, m=128, n=128, k=128, alpha=1.0, lda=128, ldb=128, beta=0.0, "
                     r"ldc=128\)", text)
    assert re.search(r"launch gemm_kernel<<<\(2, 2, 1\), \(256, 1, 1\)>>>", text)
    shared = re.search(r"registers per thread: \d+, shared memory per block: (\d+) bytes", text)
    assert shared and int(shared.group(1)) >= 2 * 16 * 64 * 4                 # the A and B slices of a k-step
    assert re.search(r"@00  02 [0-9a-f]{2} 02 00 00 01 01 00 01 00", text)    # dispatch packet bytes
    assert "type KERNEL_DISPATCH" in text and "completion_signal 0x" in text
    assert re.search(r"completion signal 0x[0-9a-f]+: created at 1; .* decremented it to 0", text)
    assert re.search(r"doorbell \d+ <- \d+", text) and "ALLOC_MEMORY_OF_GPU" in text
    assert re.search(r"PCIe: [\d.]+ KiB host->device", text)
    assert re.search(r"4 blocks of 256 threads in 1 wave", text) and "warp size 32" in text
    assert re.search(r"simulated kernel time on h200: [\d.]+ us", text)
    assert re.search(r"/\*0000\*/  \S+ .* ;\s+/\* 0x[0-9a-f]{16} \*/", text)
    assert "check: C matches numpy's A @ B: yes" in text and "wall time:" in text


def test_demo_on_the_amd_profile():
    text, result = demo_text("hip", 64)
    assert result["ok"] and "warp size 64" in text and "mi300x" in text and "hip:0" in text


def test_cli_entry_point(capsys):
    assert main(["demo", "--size", "32"]) == 0
    assert "Layer 0 · hardware" in capsys.readouterr().out


SCRIPT = """\
import sys
import lapis
a = lapis.randn(64, 64, device="cuda")
b = (a @ a).relu().sum()
print("result", b.item() != 0, sys.argv[1:])
sys.exit(3 if "fail" in sys.argv else 0)
"""


def _rows(text: str, title: str) -> list[list[str]]:
    """The rows of a piped (plain text) table: the lines after its title and header, to a blank or title."""
    lines = text.splitlines()
    start = lines.index(f"{title}:") + 2
    rows = []
    for line in lines[start:]:
        if not line.strip() or line.endswith(":"):
            break
        rows.append(line.split())
    return rows


def test_trace_runs_a_script_and_writes_a_chrome_trace(tmp_path, capsys):
    from test_profiler import validate_chrome_trace
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    out_file = tmp_path / "t.json"
    assert main(["trace", "-o", str(out_file), "--summary", "--", "python", str(script), "x", "fail"]) == 3
    out = capsys.readouterr().out
    assert "result True ['x', 'fail']" in out                     # the script's own argv and exit status
    doc = json.loads(out_file.read_text())
    validate_chrome_trace(doc)
    layers = {int(r[0]): int(r[-3]) for r in _rows(out, "events per layer")}
    assert sorted(layers) == [0, 1, 2, 3, 4, 5] and all(n > 0 for n in layers.values())
    kernels = {r[0]: r for r in _rows(out, "kernels")}
    assert kernels["gemm_kernel"][1] == "1" and float(kernels["gemm_kernel"][2]) > 0
    reported = int(re.search(r"(\d+) kernels ->", out).group(1))
    assert reported == sum(int(r[1]) for r in kernels.values())


@pytest.mark.slow
def test_profile_prints_a_per_kernel_table(tmp_path, capsys):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    roof = tmp_path / "roofline.svg"
    assert main(["profile", "--roofline", str(roof), "-o", str(tmp_path / "record.json"), "--", "python",
                 str(script)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"roofline of \d+ kernels -> ", out) and roof.read_text().lstrip().startswith("<?xml")
    rows = {r[0]: r for r in _rows(out, "kernels (simulated time)")}
    gemm = rows["gemm_kernel"]
    assert gemm[1] == "1x1x1" and gemm[2] == "256x1x1" and int(gemm[3]) > 0 and int(gemm[4]) >= 8192
    assert float(gemm[6]) > 0 and float(gemm[8]) > 0                # simulated time and achieved GFLOP/s
    assert 0 < float(gemm[10].rstrip("%")) <= 100 and gemm[11] in ("compute", "memory", "latency")


def test_trace_needs_a_python_program(capsys):
    with pytest.raises(SystemExit):
        main(["trace", "--", "ls"])
    assert "python script.py" in capsys.readouterr().err


@pytest.mark.slow
def test_smi_sees_another_process_and_its_memory(tmp_path, capsys, monkeypatch):
    import os
    import subprocess
    import sys
    monkeypatch.setenv("LAPIS_SYSFS_DIR", str(tmp_path))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import lapis, sys; x = lapis.zeros(16 << 20, device='cuda'); print('ready', "
                               "flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "LAPIS_SYSFS_DIR": str(tmp_path)})
    try:
        assert holder.stdout.readline().strip() == "ready"
        import time
        time.sleep(1.0)                                            # a publish interval or two
        assert main(["smi", "--query", "pid,index,name,memory.used,memory.total,power.draw"]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert lines[0] == "pid, index, name, memory.used [MiB], memory.total [MiB], power.draw [W]"
        rows = [[c.strip() for c in ln.split(",")] for ln in lines[1:]]
        mine = [r for r in rows if r[0] == str(holder.pid)]
        assert [r[1] for r in mine] == ["0", "1"]                   # the process's two simulated GPUs
        h200 = mine[0]
        assert "H200" in h200[2] and int(h200[3]) >= 64 and int(h200[4]) > 100_000 and float(h200[5]) > 0
        assert main(["smi"]) == 0
        text = capsys.readouterr().out
        assert "processes:" in text and str(holder.pid) in text and "MiB" in text
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert main(["smi", "--query", "pid"]) == 0                    # the process is gone from the report
    assert str(holder.pid) not in capsys.readouterr().out.split()
    assert main(["smi", "--query", "index,clocks.sm", "-l", "0.05", "--count", "3"]) == 0     # -l refreshes
    assert capsys.readouterr().out.count("index, clocks.sm [MHz]") == 3
    with pytest.raises(SystemExit):
        main(["smi", "--query", "bogus"])


def test_info_reports_every_layer(capsys):
    assert main(["info"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for layer in range(6):
        assert any(ln.startswith(f"Layer {layer} ") for ln in lines), layer
    assert any(re.match(r"Layer 3 lapis.cuda: device 0 NVIDIA H200 .* warp 32", ln) for ln in lines)
    assert any(re.match(r"Layer 2 runtime agent gpu1:mi300x: .* wavefront 64", ln) for ln in lines)
    assert any(re.match(r"Layer 1 driver: kfd \d+\.\d+, 2 GPUs", ln) for ln in lines)


@pytest.mark.slow
def test_bench_quick_runs_every_benchmark(capfd):
    assert main(["bench", "--quick"]) == 0
    out = capfd.readouterr().out
    assert [ln for ln in out.splitlines() if ln.startswith("== ")] == \
        ["== simulator.py", "== libs.py", "== seed_matmul.py", "== framework.py"]
    assert out.count("% of peak") == 3 and "per training step" in out and "numpy A @ B" in out


def test_bench_micro_runs_the_microbenchmarks_with_their_options(monkeypatch, tmp_path):
    """`lapis bench micro` runs benchmarks/micro.py with --quick, --device and --plot (tests/test_calibration.py
    runs its measurements); --plot and --device belong to it alone."""
    import subprocess
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda argv: ran.append(argv) or subprocess.CompletedProcess(argv, 0))
    png = str(tmp_path / "latency.png")
    assert main(["bench", "micro", "--quick", "--device", "cuda", "--plot", png]) == 0
    (argv,) = ran
    assert argv[0] == sys.executable and argv[1].endswith("benchmarks/micro.py") and Path(argv[1]).is_file()
    assert argv[2:] == ["--quick", "--plot", png, "--device", "cuda"]
    with pytest.raises(SystemExit):
        main(["bench", "--plot", png])


SAXPY = """\
import numpy as np
from lapis import cuda

@cuda.jit
def saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]

n = 4096
x, y = cuda.to_device(np.ones(n, np.float32)), cuda.to_device(np.ones(n, np.float32))
out = cuda.device_array(n, np.float32)
saxpy[n // 256, 256](np.float32(2), x, y, out)
print(out.copy_to_host()[:2])
"""
ROW = re.compile(r"/\*([0-9a-f]{4})\*/\s+(.*?;)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(.+)$")


def test_disasm_shows_per_instruction_counts_and_stalls(tmp_path, capsys, monkeypatch):
    import glob
    script, record, dump = tmp_path / "saxpy.py", tmp_path / "record.json", tmp_path / "dump"
    script.write_text(SAXPY)
    monkeypatch.setenv("LAPIS_DUMP_DIR", str(dump))               # also writes the code object
    assert main(["profile", "-o", str(record), "--", "python", str(script)]) == 0
    assert "per-instruction record of" in capsys.readouterr().out
    assert main(["disasm", "saxpy", "--profile", str(record)]) == 0
    out = capsys.readouterr().out
    rows = [m.groups() for m in map(ROW.search, out.splitlines()) if m]
    assert rows and rows[0][1].startswith("S2R")
    # 4096 threads are 128 warps of 32: the first instruction runs once per warp and per thread
    assert (int(rows[0][2]), int(rows[0][3])) == (128, 4096)
    executed = int(re.search(r"(\d+) warp-instructions executed", out).group(1))
    assert sum(int(r[2]) for r in rows) == executed
    loads = [i for i, r in enumerate(rows) if r[1].startswith("LDG")]
    assert loads and any(r[5] == "long scoreboard" for r in rows[loads[0] + 1:])   # waits on the load
    code_object = glob.glob(str(dump / "saxpy-*.co"))[0]
    assert main(["disasm", code_object, "--profile", str(record)]) == 0
    annotated = capsys.readouterr().out
    assert annotated.startswith("saxpy: ") and "warp execs" in annotated and " 4096 " in annotated
    assert main(["disasm", code_object]) == 0                    # its line table: cuobjdump -lineinfo's comments
    plain = capsys.readouterr().out
    assert f"// {script}:6\n" in plain and plain.index(f"// {script}:8\n") < plain.index("FFMA")
    assert main(["disasm", "nonexistent", "--profile", str(record)]) == 1
    assert "no kernel 'nonexistent'" in capsys.readouterr().err


# -- what a careless or hostile user types: one line on stderr, status 2 for usage and 1 for failures ----------------
USAGE_ERRORS = [   # (argv, where {tmp} is a scratch directory holding trace.json and prog.py; what stderr says)
    (["view", "{tmp}/trace.json", "--port", "70000"], r"argument --port: 70000: must be from 0 to 65535"),
    (["view", "{tmp}/trace.json", "--port", "-1"], r"argument --port: -1: must be from 0 to 65535"),
    (["view", "{tmp}/trace.json", "--html", "{tmp}/missing/x.html"],
     r"argument --html: cannot write .*/missing/x.html: there is no directory .*/missing"),
    (["view", "{tmp}/trace.json", "--html", "{tmp}"], r"argument --html: cannot write .*: it is a directory"),
    (["hipify", "{tmp}/prog.py", "-o", "{tmp}/missing/out.py"], r"argument -o/--output: cannot write"),
    (["trace", "-o", "{tmp}/missing/t.json", "--", "python", "{tmp}/prog.py"], r"argument -o/--output: cannot write"),
    (["profile", "--roofline", "{tmp}/r.xyz", "--", "python", "{tmp}/prog.py"],
     r"argument --roofline: cannot draw .*r.xyz: its suffix names none of the formats matplotlib writes \(.*png"),
    (["profile", "-o", "{tmp}/missing/r.json", "--", "python", "{tmp}/prog.py"], r"argument -o/--output: cannot write"),
    (["trace", "-o", "{tmp}/t.json", "--", "python", "{tmp}/missing.py"], r"can't open file '.*missing.py'"),
    (["trace", "-o", "{tmp}/t.json", "--", "python", "{tmp}"], r"can't open file"),           # no __main__.py
    (["trace", "-o", "{tmp}/t.json", "--", "python", "-m", "no_such_module_anywhere"],
     r"no module named 'no_such_module_anywhere'"),
    (["smi", "-l", "-1"], r"argument -l/--loop: -1: must be from 0.01 to 86400"),
    (["smi", "-l", "nan"], r"argument -l/--loop: nan: must be from"),
    (["smi", "--count", "0"], r"argument --count: 0: must be at least 1"),
    (["demo", "--size", "4097"], r"argument --size: 4097: must be from 1 to 4096"),
]


@pytest.fixture
def scratch(tmp_path):
    (tmp_path / "trace.json").write_text('{"traceEvents": []}')
    (tmp_path / "prog.py").write_text("print('never runs')\n")
    return tmp_path


@pytest.mark.parametrize("argv, message", USAGE_ERRORS,
                         ids=[" ".join(argv).replace("{tmp}/", "") for argv, _ in USAGE_ERRORS])
def test_bad_arguments_are_usage_errors(scratch, capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        main([a.format(tmp=scratch) for a in argv])
    captured = capsys.readouterr()
    assert exited.value.code == 2 and re.search(message, captured.err), captured.err
    assert "Traceback" not in captured.err and "never runs" not in captured.out


def _code_object(code: bytes) -> bytes:
    from lapis import abi
    from lapis.runtime.code_object import CodeObject, KernelCode
    return CodeObject([KernelCode("k", code, abi.KernelDescriptor(compute_pgm_rsrc1=2), {"args": []})]).to_bytes()


def _record_with_bad_counts() -> str:
    """A record `lapis profile` could have written, but with one count fewer than instructions."""
    entry = {"name": "k", "profile": "h200", "registers": 2, "launches": 1, "text": ["EXIT ;"],
             "warp_executions": [], "thread_executions": [1], "stall_cycles": [0.0], "stall_reasons": [""]}
    return json.dumps({"producer": "lapis.profiler", "kernels": {"k": entry}})


RUNTIME_ERRORS = [   # (files to write, argv, what the one line on stderr says)
    ({"prog.py": b"\x00\x01\xff\xfe"}, ["hipify", "prog.py"], r"lapis hipify: .*prog.py is not UTF-8 text"),
    ({"r.json": b"\x00garbage"}, ["disasm", "k", "--profile", "r.json"],
     r"lapis disasm: .*r.json is not a record written by `lapis profile`"),
    ({"r.json": b"[1, 2]"}, ["disasm", "k", "--profile", "r.json"], r"is not a record written by `lapis profile`"),
    ({"r.json": b"[" * 100000}, ["disasm", "k", "--profile", "r.json"], r"is not a record written by"),
    ({"r.json": _record_with_bad_counts().encode()}, ["disasm", "k", "--profile", "r.json"],
     r"is not a record written by"),
    ({"k.co": _code_object(isa.encode(isa.make("EXIT")) + b"\xff" * 16)}, ["disasm", "k.co", "--profile", "none"],
     r"lapis disasm: .*k.co: kernel k: invalid instruction word 0xf+ at /\*0010\*/: unknown opcode 0xfff"),
    ({"t.json": b"[" * 100000}, ["view", "t.json"], r"lapis view: .*t.json: maximum recursion depth exceeded"),
]


@pytest.mark.parametrize("files, argv, message", RUNTIME_ERRORS, ids=[" ".join(a[:3]) for _, a, _ in RUNTIME_ERRORS])
def test_bad_files_are_one_line_errors(tmp_path, capsys, files, argv, message):
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert main([str(tmp_path / a) if a in files or a == "none" else a for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"lapis {argv[0]}: ") and err.count("\n") == 1 and re.search(message, err), err


def test_view_on_a_port_in_use_is_a_one_line_error(scratch, capsys):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["view", str(scratch / "trace.json"), "--port", str(port)]) == 1
    assert re.fullmatch(rf"lapis view: cannot serve on 127.0.0.1:{port}: .*\(--port 0 picks a free port\)\n",
                        capsys.readouterr().err)


def test_a_failing_script_shows_its_own_traceback_and_keeps_its_trace(tmp_path, capsys):
    script, out_file = tmp_path / "boom.py", tmp_path / "t.json"
    script.write_text("x = 1\nraise RuntimeError('the script failed')\n")
    assert main(["trace", "-o", str(out_file), "--", "python", str(script)]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(r'Traceback \(most recent call last\):\n  File ".*boom.py", line 2, in <module>\n.*\n'
                        r"RuntimeError: the script failed\n", err, re.S), err
    assert "cli.py" not in err and "runpy" not in err and "traceEvents" in out_file.read_text()
    script.write_text("raise KeyboardInterrupt\n")                    # Ctrl-C: the shell's status, no traceback
    assert main(["trace", "-o", str(out_file), "--", "python", str(script)]) == 130
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("env, argv, message", [
    ({"LAPIS_GPUS": "bogus"}, ["info"], r"the simulated GPUs cannot start with this environment: unknown device "
                                        r"profile 'bogus'"),
    ({"LAPIS_GPUS": "h200"}, ["demo", "--device", "hip"],
     r"--device hip: no such GPU is simulated \(LAPIS_GPUS=h200\)"),
], ids=["LAPIS_GPUS=bogus info", "LAPIS_GPUS=h200 demo --device hip"])
def test_a_bad_environment_is_a_usage_error(env, argv, message):
    import os
    import subprocess
    import sys
    ran = subprocess.run([sys.executable, "-m", "lapis.cli", *argv], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env})
    assert ran.returncode == 2 and re.search(message, ran.stderr) and "Traceback" not in ran.stderr, ran.stderr
