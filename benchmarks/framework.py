"""Layer 5's costs on a simulated GPU: the wall time of one op on tiny tensors (the fixed cost of a
framework op going down the stack), and of one training step of each example's model.

    python benchmarks/framework.py [--device cuda|hip] [--repeat N] [--steps N] [--settle N]

Per op: the mean wall time of `x + y` on 4-element tensors over `repeat` ops, synchronized at the
end, the fastest of five rounds after a warm-up round, beside the same on cpu and in PyTorch. Per
step: forward, backward and optimizer step of the digits MLP, the digits CNN, the character
transformer and a tiny GPT (nanoGPT's smallest) at the examples' batch sizes, after a warm-up step
(which compiles the kernels) and a traced one (which counts the kernels a step launches and their
simulated time), with the same step on lapis's cpu device in rounds taken in turn with the device's (the
host's speed drifts; a ratio needs both times from the same minutes); the tiny GPT's also after `--settle` more
steps, a training run's steady state (its hot arithmetic compiled into fused runs by then). `--digits`
also trains the digits MLP (64-128-10, batch 64) for 330 Adam steps. `--cpu-ops` times a dozen common ops on a
(4, 8) cpu tensor beside PyTorch's (the framework's own overhead per op: issue 14's fourth item).
"""

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np

import lapis
from lapis import nn, trace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))


def per_op(device: str, repeat: int) -> tuple[float, int]:
    """The mean wall time of x + y on 4-element tensors, and the kernels one such op launches."""
    x, y = lapis.ones(4, device=device), lapis.ones(4, device=device)
    (x + y).cpu()                                    # compiles and warms the caches
    with trace() as t:
        (x + y).cpu()
    return best_of(lambda: (x + y), lambda z: z.cpu(), repeat), len(t.select(0, "kernel"))


def best_of(op, finish, repeat: int, rounds: int = 5) -> float:
    """The mean time of `op` over `repeat` calls (then `finish` on the last result), the fastest of
    `rounds` rounds after a warm-up round: the host is shared, and the least disturbed round is the
    op's own cost."""
    times = []
    for _ in range(rounds + 1):
        start = time.perf_counter()
        for _ in range(repeat):
            z = op()
        finish(z)
        times.append((time.perf_counter() - start) / repeat)
    return min(times[1:])


def models(device: str):
    import char_transformer
    import digits_cnn
    import digits_mlp
    rng = np.random.default_rng(0)
    chars = len(set(char_transformer.TEXT))
    yield ("digits MLP, batch 256", digits_mlp.model(), lapis.tensor(rng.random((256, 64), np.float32)),
           lapis.tensor(rng.integers(0, 10, 256)), nn.CrossEntropyLoss())
    yield ("digits CNN, batch 64", digits_cnn.model(), lapis.tensor(rng.random((64, 1, 8, 8), np.float32)),
           lapis.tensor(rng.integers(0, 10, 64)), nn.CrossEntropyLoss())
    ce = nn.CrossEntropyLoss()

    def next_char_loss(logits, y):
        return ce(logits.reshape(-1, chars), y.reshape(-1))
    transformer = char_transformer.CharTransformer(chars, 32)
    yield ("char transformer, 16 x 32 tokens", transformer, lapis.tensor(rng.integers(0, chars, (16, 32))),
           lapis.tensor(rng.integers(0, chars, (16, 32))), next_char_loss)
    # nanoGPT/makemore's smallest: 2 layers, 2 heads, 32 wide, a block of 16 characters, batch 8
    tiny = char_transformer.CharTransformer(chars, 16, width=32, heads=2, layers=2)
    yield ("tiny GPT, 8 x 16 tokens", tiny, lapis.tensor(rng.integers(0, chars, (8, 16))),
           lapis.tensor(rng.integers(0, chars, (8, 16))), next_char_loss)


def trainer(model, x, y, loss_fn, device: str):
    """A training step (forward, backward, Adam) of a copy of `model` on `device`, as a function returning the loss."""
    model = copy.deepcopy(model).to(device)
    x, y = x.to(device), y.to(device)
    optimizer = lapis.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def paired(steppers: list, steps: int, rounds: int) -> list[float]:
    """Each stepper's wall time per step, the fastest of `rounds` rounds of `steps` steps, the steppers' rounds taken
    in turn: the host's speed drifts over seconds, and the tiny GPT's cuda/cpu ratio from times measured a minute
    apart ranged over 4.1x-7.7x in six runs on the 2-core machine, from rounds side by side over 5.3x-5.5x in three."""
    best = [float("inf")] * len(steppers)
    for _ in range(rounds):
        for i, step in enumerate(steppers):
            start = time.perf_counter()
            for _ in range(steps):
                step()
            best[i] = min(best[i], (time.perf_counter() - start) / steps)
    return best


def step_time(model, x, y, loss_fn, device: str, steps: int, rounds: int = 3, settle: int = 0) -> dict:
    """Wall time per training step on `device` and on cpu, in rounds side by side (`paired`), kernels per step and
    their simulated time (us) per step; with `settle`, the same wall times again after `settle` more steps on
    `device`, a training run's steady state (its hot arithmetic compiled by then, or loaded from the disk cache an
    earlier run filled: `SimtCore.FUSE_AFTER`)."""
    gpu, cpu = trainer(model, x, y, loss_fn, device), trainer(model, x, y, loss_fn, "cpu")
    gpu(), cpu()                           # the first step also creates the optimizer's state
    with trace() as t:                     # one step traced, for its kernels; the timed ones untraced, as users run
        gpu()
    kernels = t.select(0, "kernel")
    result = {"launches": len(kernels), "device_us": sum(k.args["duration_ns"] for k in kernels) / 1e3}
    result["wall"], result["on_cpu"] = paired([gpu, cpu], steps, rounds)
    if settle:
        for _ in range(settle):
            gpu()
        result["steady"], result["steady_cpu"] = paired([gpu, cpu], steps, rounds)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeat", type=int, default=200,
                        help="tiny ops per timed round (each round ends in one copy back, about 70 us on cuda)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--models", default="mlp,cnn,transformer,gpt", help="which models to time (comma list)")
    parser.add_argument("--settle", type=int, default=40,
                        help="steps the tiny GPT trains before its steady-state step is timed")
    parser.add_argument("--cpu-ops", action="store_true",
                        help="also time common ops on a (4, 8) cpu tensor beside PyTorch's")
    parser.add_argument("--digits", action="store_true",
                        help="also train the 64-128-10 digits MLP for 330 Adam steps (batch 64) and time it")
    args = parser.parse_args()
    (gpu, kernels), (cpu, _) = per_op(args.device, args.repeat), per_op("cpu", args.repeat)
    print(f"x + y on 4 elements: {gpu * 1e6:.0f} us of wall time per op on {args.device} ({kernels} kernel), "
          f"{cpu * 1e6:.1f} us on cpu, {torch_per_op(args.repeat) * 1e6:.1f} us in PyTorch on the CPU")
    if args.cpu_ops:
        print("ops on small cpu tensors, wall time per op:")
        cpu_ops(max(args.repeat, 1000))
    wanted = args.models.split(",")
    for (name, model, x, y, loss_fn), key in zip(models(args.device), ("mlp", "cnn", "transformer", "gpt"),
                                                 strict=True):
        if key in wanted:
            settle = args.settle if key == "gpt" else 0
            r = step_time(model, x, y, loss_fn, args.device, args.steps, settle=settle)
            print(f"{name}: {r['wall']:.3f} s of wall time per training step on {args.device} "
                  f"({r['wall'] / r['on_cpu']:.1f}x the {r['on_cpu']:.3f} s on cpu, in rounds side by side), "
                  f"{r['launches']} kernels, {r['device_us']:.0f} us of simulated device time"
                  + (f"; after {settle} more steps {r['steady']:.3f} s ({r['steady'] / r['steady_cpu']:.1f}x the "
                     f"{r['steady_cpu']:.3f} s on cpu)" if settle else ""))
    if args.digits:
        import digits_mlp
        result = digits_mlp.train(args.device, epochs=15, hidden=128, batch_size=64, quiet=True)
        print(f"digits MLP 64-128-10, batch 64, 15 epochs ({result['steps']} Adam steps): "
              f"{result['accuracy']:.1%} test accuracy in {result['wall_s']:.1f} s on {args.device}")


# Common ops on small cpu tensors: each a function of the module (lapis or torch) and the operands `cpu_ops` makes
# once with it, x and z (4, 8), y (1, 8) and w (8, 3).
CPU_OPS = {
    "x + z": lambda m, x, z, y, w: x + z,
    "x + y, (4, 8) + (1, 8)": lambda m, x, z, y, w: x + y,
    "x * 2.0": lambda m, x, z, y, w: x * 2.0,
    "x.exp()": lambda m, x, z, y, w: x.exp(),
    "relu(x)": lambda m, x, z, y, w: m.relu(x),
    "x > 0": lambda m, x, z, y, w: x > 0,
    "x.sum()": lambda m, x, z, y, w: x.sum(),
    "x.mean()": lambda m, x, z, y, w: x.mean(),
    "x.max()": lambda m, x, z, y, w: x.max(),
    "softmax(x, 1)": lambda m, x, z, y, w: m.softmax(x, 1),
    "x @ w, (4, 8) @ (8, 3)": lambda m, x, z, y, w: x @ w,
    "cat([x, x])": lambda m, x, z, y, w: m.cat([x, x]),
    "x[0]": lambda m, x, z, y, w: x[0],
    "x.t()": lambda m, x, z, y, w: x.t(),
    "zeros(4, 8)": lambda m, x, z, y, w: m.zeros(4, 8),
}


def cpu_ops(repeat: int) -> None:
    """Print each of CPU_OPS's wall time per op on lapis's cpu device and in PyTorch, and their ratio."""
    try:
        import torch
        torch.set_num_threads(1)                   # as lapis's cpu device runs: one thread, no pool to wake
    except ImportError:
        torch = None

    def per_op(m, op) -> float:
        operands = m.ones(4, 8), m.ones(4, 8), m.ones(1, 8), m.ones(8, 3)
        return best_of(lambda: op(m, *operands), lambda z: None, repeat)
    for name, op in CPU_OPS.items():
        ours = per_op(lapis, op)
        theirs = per_op(torch, op) if torch else float("nan")
        print(f"  {name:24s} {ours * 1e6:6.1f} us on cpu, {theirs * 1e6:5.1f} us in PyTorch, {ours / theirs:4.1f}x")


def torch_per_op(repeat: int) -> float:
    """PyTorch's own wall time for the same tiny add on the CPU (the yardstick), or NaN without torch."""
    try:
        import torch
    except ImportError:
        return float("nan")
    x, y = torch.ones(4), torch.ones(4)
    return best_of(lambda: x + y, lambda z: None, repeat)


if __name__ == "__main__":
    main()
