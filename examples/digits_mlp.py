"""Train a small MLP on scikit-learn's digits (8x8 images of 0-9) on the simulated GPU, PyTorch-style.

    python examples/digits_mlp.py [--device cuda|cpu|hip] [--epochs 8] [--hidden 256]

The program is what a PyTorch user writes, with `import lapis as torch`: every forward op, every
gradient and every optimizer update runs as kernels on the simulated H200 (`cuda`).
"""

import argparse
import sys
import time

import numpy as np
from sklearn.datasets import load_digits

import lapis as torch
from lapis import nn
from lapis.utils.data import DataLoader, TensorDataset


def data(seed: int = 0):
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)             # (1797, 64) in [0, 1]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    test, train = order[:360], order[360:]
    return torch.from_numpy(x[train]), torch.from_numpy(y[train]), torch.from_numpy(x[test]), torch.from_numpy(y[test])


def progress(epoch: int, epochs: int, done: int, total: int, loss: float) -> None:
    width = 30
    filled = width * done // total
    sys.stdout.write(f"\repoch {epoch + 1:2d}/{epochs} [{'#' * filled}{'.' * (width - filled)}] loss {loss:.4f}")
    sys.stdout.flush()


def accuracy(net, x, y, device) -> float:
    net.eval()
    with torch.no_grad():
        predicted = net(x.to(device)).argmax(1).cpu()
    net.train()
    return (predicted == y).float().mean().item()


def model(hidden: int = 256) -> nn.Module:
    # (N, 64) -> (N, hidden) -> (N, 10)
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def train(device: str = "cuda", epochs: int = 8, hidden: int = 256, batch_size: int = 256, lr: float = 5e-2,
          seed: int = 0, quiet: bool = False) -> dict:
    torch.manual_seed(seed)
    x_train, y_train, x_test, y_test = data(seed)
    net = model(hidden).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=batch_size, shuffle=True, generator=seed)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(loader))
    start = time.perf_counter()
    for epoch in range(epochs):
        for step, (xb, yb) in enumerate(loader):
            xb, yb = xb.to(device), yb.to(device)
            loss = loss_fn(net(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            if not quiet and (step % 5 == 0 or step == len(loader) - 1):
                progress(epoch, epochs, step + 1, len(loader), loss.item())
        if not quiet:
            print(f"  test accuracy {accuracy(net, x_test, y_test, device):.3f}")
    wall = time.perf_counter() - start
    acc = accuracy(net, x_test, y_test, device)
    if not quiet:
        print(f"{device}: {acc:.1%} test accuracy after {epochs} epochs, {wall:.1f} s of wall time")
    return {"accuracy": acc, "wall_s": wall, "steps": epochs * len(loader)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=5e-2)
    args = parser.parse_args()
    train(args.device, args.epochs, args.hidden, args.batch_size, args.lr)
