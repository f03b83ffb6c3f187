"""Layer 5's costs on a simulated GPU: the wall time of one op on tiny tensors (the fixed cost of a
framework op going down the stack), and of one training step of each example's model.

    python benchmarks/framework.py [--device cuda|hip] [--repeat N] [--steps N]

Per op: the mean wall time of `x + y` on 4-element tensors over `repeat` ops, synchronized at the
end, beside the same on cpu. Per step: forward, backward and optimizer step of the digits MLP,
the digits CNN and the character transformer at the examples' batch sizes, after one warm-up step
(which compiles the kernels), with the number of kernels a step launches and their simulated time.
"""

import argparse
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
    start = time.perf_counter()
    for _ in range(repeat):
        z = x + y
    z.cpu()
    return (time.perf_counter() - start) / repeat, len(t.select(0, "kernel"))


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
    transformer = char_transformer.CharTransformer(chars, 32)
    ce = nn.CrossEntropyLoss()
    yield ("char transformer, 16 x 32 tokens", transformer, lapis.tensor(rng.integers(0, chars, (16, 32))),
           lapis.tensor(rng.integers(0, chars, (16, 32))),
           lambda logits, y: ce(logits.reshape(-1, chars), y.reshape(-1)))


def step_time(model, x, y, loss_fn, device: str, steps: int) -> tuple[float, int, float]:
    model.to(device)
    x, y = x.to(device), y.to(device)
    optimizer = lapis.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()
    step()
    with trace() as t:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - start) / steps
    kernels = t.select(0, "kernel")
    return wall, len(kernels) // steps, sum(k.args["duration_ns"] for k in kernels) / steps / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--models", default="mlp,cnn,transformer", help="which models to time (comma list)")
    args = parser.parse_args()
    (gpu, kernels), (cpu, _) = per_op(args.device, args.repeat), per_op("cpu", args.repeat)
    print(f"x + y on 4 elements: {gpu * 1e3:.2f} ms of wall time per op on {args.device} ({kernels} kernel), "
          f"{cpu * 1e6:.0f} us on cpu")
    wanted = args.models.split(",")
    for (name, model, x, y, loss_fn), key in zip(models(args.device), ("mlp", "cnn", "transformer"), strict=True):
        if key in wanted:
            wall, launches, device_us = step_time(model, x, y, loss_fn, args.device, args.steps)
            print(f"{name}: {wall:.2f} s of wall time per training step on {args.device}, {launches} kernels, "
                  f"{device_us:.0f} us of simulated device time")


if __name__ == "__main__":
    main()
