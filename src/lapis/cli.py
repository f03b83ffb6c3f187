"""The `lapis` command (cross-cutting: it may import any layer).

    lapis demo [--device cuda|hip] [--size N]

runs the seed program inside `lapis.trace()` and prints its trip through the six layers,
top to bottom, with the real values of the run.

    lapis hipify FILE [-o OUT | --inplace]

rewrites a program's CUDA spellings (`lapis.cuda`, `cudaMalloc`, ...) into HIP's, as
hipify-perl does; the converted program goes to stdout (or OUT, or FILE itself) and the
statistics to stderr. A `.cu`/`.cuh` (or other C/C++) file is CUDA C++: includes, runtime
API names and `<<<...>>>` launches (-> hipLaunchKernelGGL) are rewritten.

    lapis trace [-o FILE] [--summary] -- python script.py [args]
    lapis profile -- python script.py [args]

run a Python script (or `python -m module`) in this process under `lapis.profiler`: `trace`
writes a Chrome trace (Perfetto, chrome://tracing) and with --summary prints per-layer and
per-kernel tables; `profile` prints an nsys/ncu-style table per kernel and saves the
per-instruction record that `lapis disasm KERNEL` annotates a listing with. Tables are rich in a
terminal and plain text when piped.

    lapis smi [--query FIELDS] [-l SEC] | lapis info | lapis bench [--quick] | lapis view TRACE [--html OUT]

nvidia-smi for the simulated GPUs of every running lapis process (their drivers publish their
state, driver/sysfs.py); what each layer found; the benchmark scripts; the trace viewer page.

A mistake is one line on stderr, never a traceback of lapis: a bad argument (checked by argparse before anything
runs, output paths included) exits with status 2, a file or port that fails with 1, Ctrl-C with 130. A traced
script's own error prints the script's traceback, as python would, and its record is still written.
"""

import argparse
import math
import os
import runpy
import sys
import textwrap
import time
from collections import defaultdict

import numpy as np
from rich.console import Console
from rich.markup import escape

SEED_PROGRAM = """\
import lapis
device = lapis.device('{device}')
A = lapis.randn({n}, {n}, device=device)
B = lapis.randn({n}, {n}, device=device)
C = lapis.matmul(A, B)
print(f"Calculation complete. Result shape: {{C.shape}}")"""

DEMO_MAX_SIZE = 4096    # the N x N matmul's simulated instructions grow as N^3: minutes at this size

LAYERS = {5: ("framework", "PyTorch", "PyTorch"), 4: ("libraries", "cuBLAS", "rocBLAS"),
          3: ("programming interface", "CUDA runtime, numba.cuda", "HIP"),
          2: ("runtime", "CUDA driver API", "ROCr (HSA runtime)"), 1: ("driver", "nvidia.ko", "amdgpu / amdkfd"),
          0: ("hardware", "H200 silicon", "MI300X silicon")}


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _si(n: float, unit: str) -> str:
    """1.25e6, 'warp instructions' -> '1.25 M warp instructions'; units in capitals join: '2.15 GFLOP'."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {prefix}{'' if unit.isupper() else ' '}{unit}"
    return f"{n:.0f} {unit}"


def _scalar(v) -> str:
    return str(v.item()) if hasattr(v, "item") else str(v)


class CommandError(Exception):
    """A failure the user can fix (a file that is not what the command reads, a port in use): `main` prints it as
    one line and exits with status 1."""


def _number(kind: type, low: float, high: float, why: str = ""):
    """An argparse type: an int or float in [low, high], refused as a usage error otherwise (NaN included)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not low <= value <= high:
            bounds = f"at least {low}" if high == math.inf else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"{text}: must be {bounds}{why}")
        return value
    return parse


def _output_file(path: str) -> str:
    """An argparse type: a file the command will write, checked before it runs anything (a trace may take minutes)."""
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"cannot write {path}: there is no directory {folder}")
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"cannot write {path}: it is a directory")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {path}: the directory {folder} is not writable")
    return path


def _figure_file(path: str) -> str:
    """An argparse type: an output file whose suffix names a format matplotlib draws."""
    from matplotlib.backend_bases import FigureCanvasBase
    formats = FigureCanvasBase.get_supported_filetypes()
    if os.path.splitext(path)[1].lstrip(".").lower() not in formats:
        raise argparse.ArgumentTypeError(f"cannot draw {path}: its suffix names none of the formats matplotlib "
                                         f"writes ({', '.join(sorted(formats))})")
    return _output_file(path)


def run_demo(device_type: str = "cuda", n: int = 1024, console: Console | None = None) -> dict:
    """Run the seed program under a trace and print its trip; returns the figures it printed."""
    import lapis

    console = console or Console(highlight=False, soft_wrap=True)
    program = SEED_PROGRAM.format(device=device_type, n=n)
    out = console.print
    out(f"[bold]lapis demo[/bold]: the seed program, traced through all six layers ({device_type}, {n}x{n})\n")
    out(textwrap.indent(program, "    "), markup=False)
    out()
    scope: dict = {"print": lambda *args: out(" ".join(map(str, args)), markup=False)}   # the program's output
    wall_start = time.perf_counter()
    with lapis.trace() as t:
        exec(compile(program, "<seed program>", "exec"), scope)   # noqa: S102 - the fixed program above
        A, B, C = scope["A"], scope["B"], scope["C"]
        c_host = C.cpu().numpy()     # the sync point: waits for the kernel's completion signal
    wall = time.perf_counter() - wall_start
    matmul = t.first(5, "matmul")
    matmul_wall = matmul.wall_ms

    def section(layer: int) -> None:
        name, cuda_name, rocm_name = LAYERS[layer]
        out()
        out(f"[bold cyan]Layer {layer} · {name}[/bold cyan]  [dim](CUDA world: {cuda_name}; ROCm world: "
            f"{rocm_name})[/dim]")

    def line(text: str) -> None:
        out("  " + text)

    # Layer 5
    mm = matmul.args
    section(5)
    line(f"lapis.matmul(A, B): A {mm['a_shape']} {mm['dtype']}, B {mm['b_shape']} {mm['dtype']} on "
         f"{mm['device']} -> C {mm['out_shape']}")
    for e in t.select(5, "randn"):
        line(f"lapis.randn({', '.join(map(str, e.args['shape']))}) -> {e.args['dtype']} on {e.args['device']}")

    # Layer 4
    g = t.first(4, "sgemm").args
    section(4)
    line(f"sgemm(transa={g['transa']}, transb={g['transb']}, m={g['m']}, n={g['n']}, k={g['k']}, "
         f"alpha={g['alpha']}, lda={g['lda']}, ldb={g['ldb']}, beta={g['beta']}, ldc={g['ldc']})")
    line("row-major C = A @ B is column-major C^T = B^T A^T: the operands are swapped, as PyTorch calls cuBLAS")
    line(f"kernel {g['kernel']}, tile {g['tile']}")

    # Layer 3
    launch = next(e.args for e in t.select(3, "launch") if e.args["kernel"] == g["kernel"])
    section(3)
    compiled = [e for e in t.select(3, "compile") if e.args["kernel"] == g["kernel"]]
    if compiled:
        ev = compiled[0]
        how = ("loaded from the on-disk compile cache" if ev.args.get("cached")
               else "compiled (Python AST -> SSA IR -> lapis ISA)")
        line(f"{ev.args['kernel']} {how} in {ev.wall_ms:.0f} ms: {ev.args['instructions']} instructions")
    grid, block = launch["grid"], launch["block"]
    line(f"launch {launch['kernel']}<<<({grid[0]}, {grid[1]}, {grid[2]}), ({block[0]}, {block[1]}, {block[2]})>>> "
         f"on {launch['device']}")
    line(f"registers per thread: {launch['registers']}, shared memory per block: {launch['shared_bytes']} bytes")
    line("kernel arguments (" + str(launch["kernarg_bytes"]) + " bytes): " +
         ", ".join(f"{k}={_scalar(v)}" for k, v in launch["args"].items()))

    # Layer 2
    dispatch = next(e for e in t.select(2, "packet") if e.args["fields"]["header"]["type"] == "KERNEL_DISPATCH")
    packet, dispatch_seq = dispatch.args, dispatch.seq
    fields = packet["fields"]
    section(2)
    line(f"queue {packet['queue']} on {packet['agent']}: packet index {packet['index']} -> slot {packet['slot']} "
         f"at {packet['slot_va']:#x} (ring at {packet['ring_va']:#x})")
    raw = bytes.fromhex(packet["bytes_hex"])
    line("kernel-dispatch packet, 64 bytes:")
    for off in range(0, 64, 16):
        line(f"  @{off:02d}  " + " ".join(f"{b:02x}" for b in raw[off:off + 16]))
    h = fields["header"]
    line(f"header: type {h['type']}, barrier {int(h['barrier'])}, acquire scope {h['acquire_fence_scope']}, "
         f"release scope {h['release_fence_scope']}; setup: {fields['setup']} dimension(s)")
    line(f"workgroup {fields['workgroup_size_x']}x{fields['workgroup_size_y']}x{fields['workgroup_size_z']}, "
         f"grid {fields['grid_size_x']}x{fields['grid_size_y']}x{fields['grid_size_z']} work-items, "
         f"group segment {fields['group_segment_size']} bytes")
    line(f"kernel_object {fields['kernel_object']:#x}, kernarg_address {fields['kernarg_address']:#x}, "
         f"completion_signal {fields['completion_signal']:#x}")
    waits = [e.args for e in t.select(2, "signal_wait") if e.args["signal"] == fields["completion_signal"]
             and e.seq > dispatch_seq]
    if waits:
        line(f"completion signal {fields['completion_signal']:#x}: created at 1; at C.cpu() the host waited until "
             f"it was {waits[0]['condition']} {waits[0]['target']}: the device had decremented it to "
             f"{waits[0]['value']}")

    # Layer 1
    section(1)
    bell = next(e.args for e in t.select(1, "doorbell") if e.seq > dispatch_seq)
    line(f"doorbell {bell['doorbell']} <- {bell['value']} (a 64-bit MMIO write over PCIe to {bell['device']})")
    allocs = t.select(1, "ALLOC_MEMORY_OF_GPU")
    vram = [e for e in allocs if "VRAM" in e.args["flags"]]
    gtt = [e for e in allocs if "GTT" in e.args["flags"]]
    line(f"ALLOC_MEMORY_OF_GPU x{len(allocs)}: VRAM {_bytes(sum(e.args['size'] for e in vram))} in {len(vram)} "
         f"buffers (matrices, code), GTT {_bytes(sum(e.args['size'] for e in gtt))} in {len(gtt)} (rings, signals, "
         "kernel arguments, staging)")
    line(f"MAP_MEMORY_TO_GPU x{len(t.select(1, 'MAP_MEMORY_TO_GPU'))} (page-table entries written into VRAM), "
         f"CREATE_QUEUE x{len(t.select(1, 'CREATE_QUEUE'))}, CREATE_EVENT x{len(t.select(1, 'CREATE_EVENT'))}")
    pcie = t.select(0, "pcie")
    to_dev = sum(e.args["bytes"] for e in pcie if e.args["direction"] == "host->device")
    to_host = sum(e.args["bytes"] for e in pcie if e.args["direction"] == "device->host")
    pcie_ns = sum(e.args["modelled_ns"] for e in pcie)
    line(f"PCIe: {_bytes(to_dev)} host->device, {_bytes(to_host)} device->host in {len(pcie)} transactions, "
         f"modelled {pcie_ns / 1e3:.1f} us")

    # Layer 0
    k = next(e for e in t.select(0, "kernel") if e.args["grid"] == tuple(grid))
    ka = k.args
    section(0)
    from lapis.hardware import get_profile  # the CLI may import any layer; the profile's peak for context
    profile = get_profile(ka["profile"])
    line(f"{ka['device']} ({profile.marketing_name}, warp size {ka['warp_size']}): {ka['blocks']} blocks of "
         f"{ka['block'][0] * ka['block'][1] * ka['block'][2]} threads in {ka['waves']} wave(s), "
         f"{ka['blocks_per_unit']} blocks per compute unit (limited by {ka['occupancy_limiter']})")
    line(f"executed {_si(ka['warp_instructions'], 'warp instructions')} = "
         f"{_si(ka['thread_instructions'], 'thread instructions')}, {_si(ka['flops'], 'FLOP')}, "
         f"{_bytes(ka['global_bytes'])} of global loads and stores")
    share = {level: ka[f"{level}_hits"] / max(1, ka["global_sectors"]) for level in ("l1", "l2", "far")}
    line(f"counters: {ka['global_sectors']:,} sectors of 32 B ({share['l1']:.0%} L1 hits, {share['l2']:.0%} L2 "
         f"hits, {share['far']:.0%} far-level hits, {_bytes(ka['dram_bytes'])} from DRAM), "
         f"{ka['bank_conflicts']:,} shared-memory bank-conflict replays, "
         f"{ka['average_active_lanes']:.1f} active lanes per warp instruction, "
         f"occupancy {ka['achieved_occupancy']:.0%} achieved of {ka['theoretical_occupancy']:.0%}")
    tflops = ka["flops"] / ka["time_ns"] / 1e3
    line(f"simulated kernel time on {profile.name}: {ka['time_ns'] / 1e3:.1f} us (limiter: {ka['limiter']}) "
         f"-> {tflops:.1f} TFLOP/s, {tflops / profile.fp32_tflops:.0%} of the FP32 peak")
    line("disassembly (first lines):")
    for text in ka["disassembly"].splitlines()[:12]:
        out("    " + escape(text), highlight=False)

    # The check and the figures
    a, b = A.cpu().numpy(), B.cpu().numpy()
    t0 = time.perf_counter()
    expected = a @ b
    numpy_ms = (time.perf_counter() - t0) * 1e3
    err = float(np.abs(c_host - expected).max())
    rel = err / float(np.abs(expected).max())
    ok = np.allclose(c_host, expected, rtol=1e-4, atol=1e-4 * np.sqrt(n))
    out()
    out(f"[bold]check[/bold]: C matches numpy's A @ B: {'yes' if ok else 'NO'} (max abs error {err:.2e}, "
        f"relative {rel:.1e})")
    sim_s = ka["simulation_wall_s"]
    out(f"[bold]wall time[/bold]: {wall:.2f} s for the program, {matmul_wall / 1e3:.2f} s in lapis.matmul, of which "
        f"{sim_s:.2f} s executing the kernel on the simulator "
        f"({_si(ka['thread_instructions'] / sim_s, 'thread instructions/s')}); numpy's A @ B: {numpy_ms:.1f} ms")
    return {"ok": ok, "max_error": err, "wall_s": wall, "matmul_s": matmul_wall / 1e3, "kernel_ns": ka["time_ns"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lapis", description="lapis: the AI compute stack in Python")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the seed program and print its trip through the six layers")
    demo.add_argument("--device", choices=["cuda", "hip"], default="cuda",
                      help="cuda: the H200-like GPU (warp 32); hip: the MI300X-like GPU (wavefront 64)")
    demo.add_argument("--size", type=_number(int, 1, DEMO_MAX_SIZE, " (the simulated matmul's time grows as N^3)"),
                      default=1024, help=f"matrix size N for the N x N matmul, 1..{DEMO_MAX_SIZE} (default 1024)")
    hip = sub.add_parser("hipify", help="rewrite a program's CUDA spellings into HIP's, as hipify-perl does",
                         description="Rewrite a Python program that uses lapis.cuda into one that uses lapis.hip: "
                         "imports, cuda.X, and the runtime API (cudaMalloc -> hipMalloc, cudaSuccess -> hipSuccess, "
                         "...). Strings and comments are left alone, so framework device strings such as "
                         "lapis.device('cuda') stay, as in PyTorch's ROCm build. A .cu/.cuh (or other C/C++) file is "
                         "CUDA C++: includes, runtime API names and kernel<<<...>>> launches (-> hipLaunchKernelGGL) "
                         "are rewritten. Statistics go to stderr.")
    hip.add_argument("file", help="the Python program (or CUDA C++ source, by its suffix) to convert")
    where = hip.add_mutually_exclusive_group()
    where.add_argument("-o", "--output", metavar="OUT", type=_output_file,
                       help="write the converted program to OUT (default: stdout)")
    where.add_argument("--inplace", action="store_true", help="overwrite FILE with the converted program")
    for name, text in (("trace", "run a Python script under the tracer and write a Chrome trace of every layer"),
                       ("profile", "run a Python script and print a per-kernel table, as nsys and ncu summarize")):
        run = sub.add_parser(name, help=text, description=f"lapis {name} -- python script.py [args]: {text}.")
        if name == "trace":
            run.add_argument("-o", "--output", default="lapis-trace.json", type=_output_file,
                             help="where the Chrome trace goes (default lapis-trace.json)")
            run.add_argument("--summary", action="store_true", help="also print per-layer and per-kernel tables")
        if name == "profile":
            run.add_argument("--roofline", metavar="FILE", type=_figure_file,
                             help="also draw the kernels' roofline (PNG, SVG, PDF)")
            run.add_argument("-o", "--output", default="lapis-profile.json", type=_output_file,
                             help="where the per-instruction record for lapis disasm goes (default "
                                  "lapis-profile.json)")
        run.add_argument("program", nargs=argparse.REMAINDER, help="-- python script.py [args], or python -m module")
    smi = sub.add_parser("smi", help="the simulated GPUs' state, as nvidia-smi and rocm-smi show it",
                         description="Every running lapis process simulates its own GPUs and its driver publishes "
                         "their state (LAPIS_SYSFS_DIR); lapis smi reads it. With no lapis process running, it "
                         "shows the GPUs that LAPIS_GPUS configures, idle.")
    smi.add_argument("--query", metavar="FIELDS",
                     help=f"comma-separated fields to print as CSV with a header: {', '.join(SMI_FIELDS)}")
    smi.add_argument("-l", "--loop", type=_number(float, 0.01, 86400), metavar="SEC",
                     help="refresh every SEC seconds (Ctrl-C stops)")
    smi.add_argument("--count", type=_number(int, 1, math.inf), help="with -l: stop after this many reports")
    sub.add_parser("info", help="every layer's version and what it found: agents, pools, device properties")
    bench = sub.add_parser("bench", help="run the benchmark suite (benchmarks/ of a source checkout) and print its "
                           "figures", description="Runs benchmarks/simulator.py, libs.py, seed_matmul.py and "
                           "framework.py in turn, as `make bench` does; `lapis bench micro` runs the microbenchmarks "
                           "(benchmarks/micro.py) beside published measurements of real GPUs.")
    bench.add_argument("suite", nargs="?", choices=["micro"], help="micro: the model against real GPUs' figures")
    bench.add_argument("--quick", action="store_true", help="reduced sizes (a minute or two)")
    bench.add_argument("--plot", metavar="PNG", type=_output_file,
                       help="with micro: draw the pointer chase's latency curve into PNG (needs matplotlib)")
    bench.add_argument("--device", choices=["cuda", "hip", "both"],
                       help="with micro: the H200 (cuda), the MI300X (hip) or both (the default)")
    view = sub.add_parser("view", help="the trace viewer page: the stack, an op's path through it, a timeline",
                          description="Serve the viewer for a Chrome trace (from lapis trace) on localhost, or "
                          "write it as one self-contained HTML file with --html. The page fetches nothing.")
    view.add_argument("trace", help="a Chrome trace written by lapis trace or profile.export_chrome_trace")
    view.add_argument("--html", metavar="OUT", type=_output_file, help="write the page to OUT instead of serving it")
    view.add_argument("--port", type=_number(int, 0, 65535), default=8000,
                      help="port to serve on (default 8000; 0 picks a free one)")
    disasm = sub.add_parser("disasm", help="a kernel's listing, with per-instruction counts and stalls when profiled",
                            description="The cuobjdump-style listing of a kernel from the last `lapis profile` "
                            "record (by name), or of every kernel in a code object file (.co, as LAPIS_DUMP_DIR "
                            "writes them); when the record holds the same code, each instruction shows how many "
                            "times warps and threads executed it and how long a warp waited on its operands, "
                            "and why (like Nsight Compute's source view).")
    disasm.add_argument("target", help="a kernel name from the record, or a code object file")
    disasm.add_argument("--profile", default="lapis-profile.json", help="the record (default lapis-profile.json)")
    args = parser.parse_args(argv)
    try:
        return _run(parser, args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:      # the reader (`| head`) has gone: stop quietly, and keep the exit's flush quiet too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:         # a file that cannot be read or written: its name and why
        print(f"lapis {args.command}: {e.filename}: {e.strerror}" if e.filename else f"lapis {args.command}: {e}",
              file=sys.stderr)
        return 1
    except CommandError as e:
        print(f"lapis {args.command}: {e}", file=sys.stderr)
        return 1


def _run(parser, args) -> int:
    if args.command in ("demo", "info", "smi"):
        _check_gpus(parser, args)
    if args.command == "disasm":
        return run_disasm(args)
    if args.command == "view":
        return run_view(args)
    if args.command == "info":
        return run_info()
    if args.command == "bench":
        if (args.plot or args.device) and args.suite != "micro":
            parser.error("--plot and --device are the microbenchmarks': lapis bench micro [--device D] [--plot PNG]")
        return run_bench(args.quick, args.suite, [*(["--plot", args.plot] if args.plot else []),
                                                  *(["--device", args.device] if args.device else [])])
    if args.command == "smi":
        return run_smi(parser, args)
    if args.command in ("trace", "profile"):
        return run_traced(parser, args)
    if args.command == "demo":
        result = run_demo(args.device, args.size)
        return 0 if result["ok"] else 1
    if args.command == "hipify":
        return run_hipify(args.file, args.output, args.inplace)
    return 2


def _check_gpus(parser, args) -> None:
    """The simulated GPUs come from the environment (LAPIS_GPUS, LAPIS_SIM, LAPIS_FUSE_AFTER): a setting they refuse
    is a usage error, reported before the command starts, as is a demo on a GPU kind that is not there."""
    from lapis import cuda, driver, hip
    try:
        driver.system()
    except ValueError as e:     # the only input at this point is the environment
        parser.error(f"the simulated GPUs cannot start with this environment: {e}")
    if args.command == "demo" and {"cuda": cuda, "hip": hip}[args.device].device_count() == 0:
        parser.error(f"--device {args.device}: no such GPU is simulated (LAPIS_GPUS="
                     f"{os.environ.get('LAPIS_GPUS', 'default')})")


# -- lapis disasm ---------------------------------------------------------------------------------------
def run_disasm(args) -> int:
    from lapis.isa import INSTRUCTION_BYTES, IsaError, decode_program, disassemble, format_instruction
    from lapis.runtime import line_table
    from lapis.runtime.code_object import CodeObject, CodeObjectError
    record = _load_record(args.profile) if os.path.exists(args.profile) else {}
    if os.path.isfile(args.target):
        with open(args.target, "rb") as f:
            data = f.read()
        try:
            kernels = CodeObject.from_bytes(data).kernels
        except CodeObjectError as e:
            raise CommandError(f"{args.target}: {e}") from None
        for k in kernels:
            try:
                program = decode_program(k.code)
            except IsaError as e:
                raise CommandError(f"{args.target}: kernel {k.name}: {e}") from None
            text = [format_instruction(inst, pc * INSTRUCTION_BYTES) for pc, inst in enumerate(program)]
            profiled = next((r for r in record.values() if r["text"] == text), None)
            print(f"{k.name}: {len(program)} instructions, {k.descriptor.registers} registers")
            print(_annotated(profiled) if profiled else
                  disassemble(program, sources=line_table.sources(k.metadata, len(program))))
        return 0
    if args.target not in record:
        known = ", ".join(sorted(record)) or "none"
        print(f"lapis disasm: no kernel {args.target!r} in {args.profile} (it holds: {known}); run `lapis profile -- "
              "python script.py` first, or give a code object file (LAPIS_DUMP_DIR writes them)", file=sys.stderr)
        return 1
    r = record[args.target]
    print(f"{r['name']} on {r['profile']}: {len(r['text'])} instructions, {r['registers']} registers, "
          f"{r['launches']} launches, {sum(r['warp_executions'])} warp-instructions executed")
    print(_annotated(r))
    return 0


# A kernel's entry in the record `lapis profile` writes (profiler.listings): its fields and their types; the
# per-instruction fields hold one value per line of "text".
RECORD_FIELDS = {"name": str, "profile": str, "registers": int, "launches": int}
RECORD_PER_INSTRUCTION = {"text": str, "warp_executions": int, "thread_executions": int,
                          "stall_cycles": (int, float), "stall_reasons": str}


def _load_record(path: str) -> dict[str, dict]:
    """The kernels of a `lapis profile` record, refused with CommandError unless every entry has the shape
    `_annotated` prints."""
    import json
    with open(path, "rb") as f:
        data = f.read()
    try:
        kernels = json.loads(data).get("kernels")
    except (ValueError, RecursionError, AttributeError):    # not JSON (or nested past json's depth), not an object
        kernels = None

    def usable(entry) -> bool:
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), t) for k, t in RECORD_FIELDS.items()):
            return False
        columns = [entry.get(k) for k in RECORD_PER_INSTRUCTION]
        return all(isinstance(c, list) and len(c) == len(entry["text"]) and all(isinstance(v, t) for v in c)
                   for c, t in zip(columns, RECORD_PER_INSTRUCTION.values(), strict=True))

    if not isinstance(kernels, dict) or not all(map(usable, kernels.values())):
        raise CommandError(f"{path} is not a record written by `lapis profile` (a JSON object whose \"kernels\" "
                           "hold each kernel's listing and counts)")
    return kernels


def _annotated(r: dict) -> str:
    """The listing with Nsight Compute's source-view columns."""
    from lapis.isa import INSTRUCTION_BYTES
    head = f"{'':8}{'address':10}{'instruction':<44}{'warp execs':>11}{'thread execs':>13}{'stall cyc':>10}  reason"
    lines = [head]
    for pc, text in enumerate(r["text"]):
        counts = f"{r['warp_executions'][pc]:>11}{r['thread_executions'][pc]:>13}{r['stall_cycles'][pc]:>10.1f}"
        lines.append(f"{'':8}/*{pc * INSTRUCTION_BYTES:04x}*/  {text:<44}{counts}  {r['stall_reasons'][pc] or '-'}")
    return "\n".join(lines)


# -- lapis view -----------------------------------------------------------------------------------------
def run_view(args) -> int:
    from lapis import viewer
    try:
        html = viewer.page(viewer.load(args.trace))
    except (ValueError, RecursionError) as e:   # not UTF-8, not JSON (or nested past json's depth), not a trace
        raise CommandError(f"{args.trace}: {e}") from None
    if args.html:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(html)
        print(f"lapis view: wrote {args.html} ({len(html) // 1024} KiB, self-contained)")
        return 0
    try:
        viewer.serve(html, args.port, ready=lambda server: print(
            f"lapis view: serving {args.trace} at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)",
            flush=True))
    except KeyboardInterrupt:
        pass
    except OSError as e:        # the port is taken, or needs privileges
        raise CommandError(f"cannot serve on 127.0.0.1:{args.port}: {e.strerror} (--port 0 picks a free port)") \
            from None
    return 0


# -- lapis info / lapis bench ---------------------------------------------------------------------------
def run_info() -> int:
    """One section per layer, top down: its version and what it found."""
    import platform

    import lapis
    from lapis import cuda, driver, hip, runtime
    from lapis.cuda.compiler import cache
    rt = runtime.init()
    version = rt.kfd.ioctl(driver.Ioctl.GET_VERSION, driver.GetVersionArgs())
    print(f"lapis {lapis.__version__} (Python {platform.python_version()}, numpy {np.__version__})")
    print(f"Layer 5 framework: lapis {lapis.__version__}; devices: cpu"
          + "".join(f", {api.__name__.rsplit('.', 1)[-1]}:{i}" for api in (cuda, hip)
                    for i in range(api.device_count()))
          + f"; default dtype {lapis.get_default_dtype().name}")
    print("Layer 4 libraries: blas, dnn, sparse, solver, kernels (lapis.libs)")
    for api in (cuda, hip):
        for i in range(api.device_count()):
            p = api.get_device_properties(i)
            print(f"Layer 3 {api.__name__}: device {i} {p.name}, compute capability {p.major}.{p.minor}, "
                  f"{p.multi_processor_count} units, warp {p.warp_size}, {p.total_memory // 2**20} MiB, "
                  f"{p.shared_memory_per_block // 1024} KiB shared per block")
    print(f"Layer 3 compiler cache: {cache.directory() or 'off'}")
    for agent in rt.agents:
        info = agent.info()
        if agent.kind == "cpu":
            print(f"Layer 2 runtime agent {agent.name}: host CPU")
            continue
        pools = ", ".join(f"{kind} ({'VRAM' if kind == 'device' else 'system memory'})"
                          for kind in ("device", "host", "kernarg"))
        print(f"Layer 2 runtime agent {agent.name}: {info['product_name']}, {info['compute_unit_count']} compute "
              f"units, wavefront {info['wavefront_size']}, {info['memory_size'] // 2**20} MiB; pools: {pools}")
    print(f"Layer 1 driver: kfd {version.major}.{version.minor}, {len(driver.system().nodes)} GPUs "
          f"(LAPIS_GPUS={os.environ.get('LAPIS_GPUS', 'default')})")
    for node in driver.system().nodes:
        p = node.gpu.profile
        print(f"Layer 0 hardware {node.gpu.name}: profile {p.name}, {p.compute_units} units at {p.clock_ghz} GHz, "
              f"{p.fp32_tflops} FP32 TFLOP/s, {p.matrix_tflops} matrix TFLOP/s, "
              f"{p.memory_bandwidth / 1e12:.2f} TB/s, {p.tdp_watts:.0f} W")
    return 0


BENCHMARKS = (("simulator.py", ["--threads", "16384", "--size", "256", "--repeat", "1"]),
              ("libs.py", ["--gemm-size", "256", "--axpy-size", "65536"]),
              ("seed_matmul.py", ["--size", "256"]),
              ("framework.py", ["--repeat", "10", "--steps", "1", "--models", "mlp"]))


def run_bench(quick: bool, suite: str | None = None, options: list[str] = ()) -> int:
    """The scripts of benchmarks/ (found beside the source tree: they are part of a checkout, not of the package),
    or with suite "micro" its microbenchmarks (with `options`)."""
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[2] / "benchmarks"
    if not root.is_dir():
        print(f"lapis bench: no benchmarks/ beside the source tree ({root}); run it from a source checkout",
              file=sys.stderr)
        return 1
    if suite == "micro":
        return subprocess.run([sys.executable, str(root / "micro.py"), *(["--quick"] if quick else []),
                               *options]).returncode
    status = 0
    for script, reduced in BENCHMARKS:
        print(f"== {script}", flush=True)
        status |= subprocess.run([sys.executable, str(root / script), *(reduced if quick else [])]).returncode
    return status


# -- lapis smi ---------------------------------------------------------------------------------------
SMI_FIELDS = {   # nvidia-smi's --query-gpu names, with the unit the CSV header gives
    "index": ("", lambda p, g: g["index"]), "pid": ("", lambda p, g: p["pid"]),
    "name": ("", lambda p, g: g["marketing_name"]), "profile": ("", lambda p, g: g["profile"]),
    "memory.used": ("MiB", lambda p, g: g["memory_used"] // 2**20),
    "memory.total": ("MiB", lambda p, g: g["memory_total"] // 2**20),
    "power.draw": ("W", lambda p, g: f"{g['power_watts']:.1f}"),
    "power.limit": ("W", lambda p, g: f"{g['power_limit_watts']:.1f}"),
    "temperature.gpu": ("C", lambda p, g: f"{g['temperature_c']:.0f}"),
    "clocks.sm": ("MHz", lambda p, g: f"{g['sm_clock_mhz']:.0f}"),
    "clocks.mem": ("MHz", lambda p, g: f"{g['memory_clock_mhz']:.0f}"),
    "utilization.gpu": ("%", lambda p, g: f"{g['utilisation'] * 100:.0f}"),
}


def _smi_states() -> list[dict]:
    """Every live lapis process's GPUs; this process's own (idle) ones when there are none."""
    from lapis.driver import kfd, sysfs
    states = sysfs.read_all(exclude_pid=os.getpid())
    return states or [sysfs.snapshot(kfd.system())]


def run_smi(parser, args) -> int:
    fields = [f.strip() for f in args.query.split(",")] if args.query else None
    unknown = [f for f in fields or [] if f not in SMI_FIELDS]
    if unknown:
        parser.error(f"unknown --query field(s) {', '.join(unknown)}; known: {', '.join(SMI_FIELDS)}")
    console = Console(highlight=False)
    reports = 0
    while True:
        states = _smi_states()
        if fields:
            print(", ".join(f"{f} [{SMI_FIELDS[f][0]}]" if SMI_FIELDS[f][0] else f for f in fields))
            for state in states:
                for g in state["gpus"]:
                    print(", ".join(str(SMI_FIELDS[f][1](state, g)) for f in fields))
        else:
            _smi_tables(console, states)
        reports += 1
        if args.loop is None or (args.count is not None and reports >= args.count):
            return 0
        try:
            time.sleep(args.loop)
        except KeyboardInterrupt:
            return 0


def _smi_tables(console: Console, states: list[dict]) -> None:
    gpus, clients = [], []
    for state in states:
        for g in state["gpus"]:
            gpus.append([f"{g['index']}", g["marketing_name"], g["profile"], str(state["pid"]),
                         f"{g['memory_used'] // 2**20} / {g['memory_total'] // 2**20} MiB",
                         f"{g['power_watts']:.0f} / {g['power_limit_watts']:.0f} W", f"{g['temperature_c']:.0f} C",
                         f"{g['sm_clock_mhz']:.0f} MHz", f"{g['utilisation']:.0%}",
                         ", ".join(g["throttle_reasons"]) or "-"])
            for c in g["clients"]:
                if c["memory"]:
                    clients.append([str(state["pid"]), state["command"][:60], str(g["index"]), str(c["client"]),
                                    f"{c['memory'] // 2**20} MiB"])
    _table(console, "GPUs (each simulated inside the process PID)",
           ["GPU", "name", "profile", "PID", "memory", "power", "temp", "SM clock", "util", "throttle"], gpus)
    _table(console, "processes", ["PID", "command", "GPU", "driver client", "GPU memory"], clients)


# -- lapis trace / lapis profile ----------------------------------------------------------------------
def _script(parser, program: list[str]) -> tuple[str, str, list[str]]:
    """("path" or "module", target, argv) from `-- python script.py args` or `-- python -m module args`."""
    if program and program[0] == "--":
        program = program[1:]
    if len(program) < 2 or not os.path.basename(program[0]).startswith("python"):
        parser.error("give the program after --, as: lapis trace -- python script.py [args] (it runs in this "
                     "process, under the tracer)")
    if program[1] == "-m":
        if len(program) < 3:
            parser.error("python -m needs a module name")
        if not _module_exists(program[2]):
            parser.error(f"no module named {program[2]!r}")
        return "module", program[2], program[2:]
    script = program[1]
    if not (os.path.isfile(script) or os.path.isfile(os.path.join(script, "__main__.py"))):
        parser.error(f"can't open file {script!r}: no such file (or directory with a __main__.py)")
    return "path", script, program[1:]


def _module_exists(name: str) -> bool:
    """Whether `python -m name` would find the module (a dotted name imports its parent packages to look)."""
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):   # a missing parent package, or a name like "" or ".x"
        return False


def _print_script_error(error: BaseException) -> None:
    """A traceback of the user's script as python prints it, without the frames of lapis and runpy that ran it."""
    import traceback
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.run_path.__code__.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb)


def run_traced(parser, args) -> int:
    """Run the script under lapis.profiler, then write or print what the command asks for."""
    from lapis import profiler
    kind, target, argv = _script(parser, args.program)
    saved_argv, saved_path, code = sys.argv, list(sys.path), 0
    sys.argv = argv
    if kind == "path":
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    try:
        with profiler.profile(record_shapes=True) as prof:
            try:
                if kind == "path":
                    runpy.run_path(target, run_name="__main__")
                else:
                    runpy.run_module(target, run_name="__main__", alter_sys=True)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, int | None):     # sys.exit("message"): python prints the message
                    print(e.code, file=sys.stderr)
            except Exception as e:      # the script's own error: its traceback, then the record of its run so far
                _print_script_error(e)
                code = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    console = Console(stderr=False, highlight=False)
    if args.command == "trace":
        prof.export_chrome_trace(args.output)
        events = prof.events()
        console.print(f"lapis trace: {len(events)} events, {len(prof.kernels())} kernels -> {args.output}")
        if args.summary:
            _table(console, "events per layer", ["layer", "name", "events", "spans", "span wall ms"],
                   _layer_rows(events))
            _table(console, "kernels", ["kernel", "calls", "device us", "avg us"], _kernel_summary(prof.kernels()))
    else:
        _table(console, "kernels (simulated time)", ["kernel", "grid", "block", "regs", "shared B", "calls",
                                                     "time us", "avg us", "GFLOP/s", "GB/s", "% peak", "limiter"],
               _kernel_profile(prof.kernels()))
        prof.save(args.output)
        console.print(f"per-instruction record of {len(prof.listings())} kernels -> {args.output} (lapis disasm)")
        if args.roofline:
            if not profiler.roofline_points(prof.kernels()):
                raise CommandError(f"no roofline to draw in {args.roofline}: the script ran no kernel that computes")
            points = prof.roofline(args.roofline)
            console.print(f"roofline of {len(points)} kernels -> {args.roofline}")
    return code


def _layer_rows(events) -> list[list[str]]:
    from lapis.trace import LAYER_NAMES
    rows = []
    for layer, name in LAYER_NAMES.items():
        mine = [e for e in events if e.layer == layer]
        spans = [e for e in mine if e.wall_end > e.wall_start]
        rows.append([str(layer), name, str(len(mine)), str(len(spans)),
                     f"{sum(e.wall_end - e.wall_start for e in spans) * 1e3:.1f}"])
    return rows


def _kernel_summary(kernels) -> list[list[str]]:
    by_name = defaultdict(list)
    for k in kernels:
        by_name[k["name"]].append(k["device_ns"])
    return [[name, str(len(ns)), f"{sum(ns) / 1e3:.1f}", f"{sum(ns) / len(ns) / 1e3:.2f}"]
            for name, ns in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))]


def _kernel_profile(kernels) -> list[list[str]]:
    """One row per kernel and launch shape: the performance model's time, the achieved FLOP/s and DRAM
    bandwidth, the larger fraction of the profile's peaks, and whether compute, memory or latency limits it."""
    from lapis import profiler
    rows = []
    for g in profiler.kernel_groups(kernels):
        peaks = profiler.device_peaks(g["profile"])
        ns, flops = g["time_ns"], g["flops"]
        peak_flops = peaks.peak_matrix_flops if g["matrix_flops"] > flops / 2 else peaks.peak_fp32_flops
        flop_rate, byte_rate = (flops / (ns * 1e-9), g["dram_bytes"] / (ns * 1e-9)) if ns else (0.0, 0.0)
        fraction = max(flop_rate / peak_flops, byte_rate / peaks.memory_bandwidth)
        rows.append([g["name"], "x".join(map(str, g["grid"])), "x".join(map(str, g["block"])), str(g["registers"]),
                     str(g["shared_bytes"]), str(g["calls"]), f"{ns / 1e3:.1f}", f"{ns / g['calls'] / 1e3:.2f}",
                     f"{flop_rate / 1e9:.1f}", f"{byte_rate / 1e9:.1f}", f"{fraction:.1%}",
                     f"{g['bound']} ({g['limiter']})"])
    return rows


def _table(console: Console, title: str, headers: list[str], rows: list[list[str]]) -> None:
    """A rich table in a terminal; aligned plain text (first column left, the rest right) when piped."""
    if console.is_terminal:
        from rich.table import Table
        table = Table(title=title)
        for i, h in enumerate(headers):
            table.add_column(h, justify="left" if i == 0 else "right")
        for r in rows:
            table.add_row(*(escape(c) for c in r))
        console.print(table)
        return
    from lapis.profiler import text_table
    print(f"{title}:")
    print("\n".join(text_table(headers, rows)))


def run_hipify(path: str, output: str | None = None, inplace: bool = False) -> int:
    """`lapis hipify`: convert a file; the program to stdout or a file, the statistics to stderr."""
    import tokenize

    from lapis.cuda.hipify import hipify

    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        result = hipify(source, path)
    except UnicodeDecodeError as e:
        raise CommandError(f"{path} is not UTF-8 text ({e.reason}), so not a program it can read") from None
    except (tokenize.TokenError, SyntaxError) as e:
        raise CommandError(f"{path} is not a Python program it can read: {e}") from None
    target = path if inplace else output
    if target is None:
        sys.stdout.write(result.source)
    else:
        with open(target, "w", encoding="utf-8") as f:
            f.write(result.source)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(result.statistics(path), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
