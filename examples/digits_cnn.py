"""Train a small CNN on scikit-learn's digits (1 x 8 x 8 images) on the simulated GPU, PyTorch-style.

    python examples/digits_cnn.py [--device cuda|cpu|hip] [--epochs 3]

Convolutions run as cuDNN-style implicit-GEMM kernels (`lapis.libs.dnn`), pooling and batch norm
likewise, the optimizer as one fused kernel per parameter.
"""

import argparse
import time

from digits_mlp import accuracy, data, progress  # examples/ is on the path when a script there runs

import lapis as torch
from lapis import nn
from lapis.utils.data import DataLoader, TensorDataset


def model() -> nn.Module:
    # (N, 1, 8, 8) -> (N, 16, 4, 4) -> (N, 32, 2, 2) -> (N, 10)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


def train(device: str = "cuda", epochs: int = 3, batch_size: int = 64, lr: float = 1e-2, seed: int = 0,
          limit: int | None = None, quiet: bool = False) -> dict:
    torch.manual_seed(seed)
    x_train, y_train, x_test, y_test = data(seed)
    x_train, x_test = x_train.reshape(-1, 1, 8, 8), x_test.reshape(-1, 1, 8, 8)
    if limit:
        x_train, y_train = x_train[:limit], y_train[:limit]
    net = model().to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    loader = DataLoader(TensorDataset(x_train.contiguous(), y_train), batch_size=batch_size, shuffle=True,
                        generator=seed)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(loader))
    loss_fn = nn.CrossEntropyLoss()
    start, losses = time.perf_counter(), []
    for epoch in range(epochs):
        for step, (xb, yb) in enumerate(loader):
            loss = loss_fn(net(xb.to(device)), yb.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
            if not quiet:
                progress(epoch, epochs, step + 1, len(loader), losses[-1])
        if not quiet:
            print(f"  test accuracy {accuracy(net, x_test, y_test, device):.3f}")
    wall = time.perf_counter() - start
    acc = accuracy(net, x_test, y_test, device)
    if not quiet:
        print(f"{device}: {acc:.1%} test accuracy after {epochs} epochs, {wall:.1f} s of wall time")
    return {"accuracy": acc, "wall_s": wall, "losses": losses}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args()
    train(args.device, args.epochs, args.batch_size, args.lr)
