"""A character-level transformer language model on five of Shakespeare's sonnets, PyTorch-style.

    python examples/char_transformer.py [--device cuda|cpu|hip] [--steps 60]

A GPT in miniature: token and position embeddings, pre-norm blocks of causal multi-head attention
(nn.MultiheadAttention, whose attention is the fused flash kernels of `lapis.libs.dnn` on a GPU)
and a GELU MLP, then a linear head over the characters. It prints the loss as it learns and a
sample of text before and after training.
"""

import argparse
import math
import time
from pathlib import Path

import lapis as torch
from lapis import nn

TEXT = (Path(__file__).parent / "data" / "sonnets.txt").read_text()


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x, causal):
        # x: (B, T, C)
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=causal, need_weights=False, is_causal=True)[0]
        return x + self.mlp(self.norm2(x))


class CharTransformer(nn.Module):
    def __init__(self, vocab: int, context: int, width: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.context = context
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)

    def forward(self, idx):
        # idx: (B, T) character indices -> logits (B, T, vocab)
        t = idx.shape[1]
        x = self.tokens(idx) + self.positions(torch.arange(t, device=idx.device))
        causal = torch.ones(t, t, dtype=torch.bool, device=idx.device).triu(1)     # True: may not attend
        for block in self.blocks:
            x = block(x, causal)
        return self.head(self.norm(x))


def batches(data, context: int, batch_size: int, generator):
    # random windows of the text: inputs (B, T) and the next characters (B, T)
    starts = torch.randint(0, len(data) - context - 1, (batch_size,), generator=generator)
    rows = starts.reshape(-1, 1) + torch.arange(context + 1).reshape(1, -1)
    window = data[rows.reshape(-1)].reshape(batch_size, context + 1)
    return window[:, :-1], window[:, 1:]


def sample(model, stoi, itos, start: str, length: int, device: str, generator) -> str:
    idx = torch.tensor([[stoi[c] for c in start]], device=device)
    with torch.no_grad():
        for _ in range(length):
            logits = model(idx[:, -model.context:])[0, -1]
            nxt = torch.multinomial(logits.softmax(-1), 1, generator=generator)
            idx = torch.cat([idx, nxt.reshape(1, 1)], 1)
    return "".join(itos[i] for i in idx[0].tolist())


def train(device: str = "cuda", steps: int = 60, batch_size: int = 16, context: int = 32, lr: float = 1e-2,
          seed: int = 0, quiet: bool = False, sample_length: int = 120) -> dict:
    import numpy as np

    torch.manual_seed(seed)
    chars = sorted(set(TEXT))
    stoi, itos = {c: i for i, c in enumerate(chars)}, dict(enumerate(chars))
    data = torch.tensor([stoi[c] for c in TEXT])
    model = CharTransformer(len(chars), context).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    loss_fn = nn.CrossEntropyLoss()
    data_rng, sample_rng = np.random.default_rng(seed), np.random.default_rng(seed + 1)
    before = sample(model, stoi, itos, "Shall ", sample_length, device, sample_rng) if sample_length else ""
    if not quiet:
        print(f"{sum(p.numel() for p in model.parameters())} parameters, {len(chars)} characters, "
              f"chance loss {math.log(len(chars)):.2f}\nbefore training: {before!r}")
    losses, start = [], time.perf_counter()
    for step in range(steps):
        x, y = batches(data, context, batch_size, data_rng)
        logits = model(x.to(device))
        loss = loss_fn(logits.reshape(-1, len(chars)), y.to(device).reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if not quiet and (step % 10 == 0 or step == steps - 1):
            print(f"step {step:4d}  loss {losses[-1]:.3f}  ({time.perf_counter() - start:.0f} s)")
    wall = time.perf_counter() - start
    after = sample(model, stoi, itos, "Shall ", sample_length, device, sample_rng) if sample_length else ""
    if not quiet:
        print(f"after {steps} steps on {device} ({wall:.0f} s of wall time):\n{after}")
    return {"losses": losses, "wall_s": wall, "before": before, "after": after, "chance": math.log(len(chars))}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args()
    train(args.device, args.steps, args.batch_size, lr=args.lr)
