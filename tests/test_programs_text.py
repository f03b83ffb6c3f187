"""Whole programs written the way public PyTorch programs on text are (pytorch/examples' word_language_model;
nanoGPT), run with `torch` and with `lapis` and compared step for step (see program_harness.py)."""

import contextlib
import inspect
import math
import os
import tempfile
from collections import namedtuple

import numpy as np
import pytest
import torch

import lapis
from program_harness import DEVICES, load_numpy_state, parameters, run_both

# --- 1. word_language_model: an LSTM over words, truncated BPTT ------------------------------------------------------

TEXT = """the cat sat on the mat
the dog sat on the log
a cat saw a dog on the mat
the dog saw the cat
"""


def rnn_model(torch, ntoken=10, ninp=8, nhid=8, nlayers=2, tie_weights=True):
    nn, F = torch.nn, torch.nn.functional

    class RNNModel(nn.Module):
        """Embedding -> LSTM -> Linear decoder (whose weight is the embedding's when tied), log-probabilities out."""

        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.2)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=0.0)
            self.decoder = nn.Linear(nhid, ntoken)
            if tie_weights:
                self.decoder.weight = self.encoder.weight
            self.ntoken, self.nhid, self.nlayers = ntoken, nhid, nlayers
            span = 0.1
            nn.init.uniform_(self.encoder.weight, -span, span)
            nn.init.zeros_(self.decoder.bias)

        def forward(self, tokens, hidden):
            emb = self.drop(self.encoder(tokens))
            output, hidden = self.rnn(emb, hidden)
            decoded = self.decoder(self.drop(output)).view(-1, self.ntoken)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))

    return RNNModel()


def word_language_model(torch, device, weights):
    class Dictionary:
        def __init__(self):
            self.word2idx, self.idx2word = {}, []

        def add_word(self, word):
            if word not in self.word2idx:
                self.idx2word.append(word)
                self.word2idx[word] = len(self.idx2word) - 1
            return self.word2idx[word]

    dictionary = Dictionary()

    def tokenize(lines):
        idss = []
        for line in lines:
            words = line.split() + ["<eos>"]
            idss.append(torch.tensor([dictionary.add_word(w) for w in words]).type(torch.int64))
        return torch.cat(idss)

    lines = TEXT.splitlines()
    train, valid, test = tokenize(lines * 2), tokenize(lines[1:3]), tokenize(lines[::-1])

    def batchify(data, bsz):
        nbatch = data.size(0) // bsz
        data = data.narrow(0, 0, nbatch * bsz)             # trim what does not fit
        return data.view(bsz, -1).t().contiguous().to(device)

    bptt, batch_size, eval_batch_size = 5, 4, 2
    train_data, val_data = batchify(train, batch_size), batchify(valid, eval_batch_size)
    test_data = batchify(test, eval_batch_size)

    def get_batch(source, i):
        seq_len = min(bptt, len(source) - 1 - i)
        return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)

    def repackage_hidden(h):
        """Hidden states cut from their history, so backpropagation stops at the batch's start."""
        if isinstance(h, torch.Tensor):
            return h.detach()
        return tuple(repackage_hidden(v) for v in h)

    model = rnn_model(torch).to(device)
    load_numpy_state(torch, model, weights)
    assert len(dictionary.idx2word) == model.ntoken
    criterion = torch.nn.NLLLoss()

    def evaluate(data_source):
        model.eval()
        total_loss = 0.0
        hidden = model.init_hidden(eval_batch_size)
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, bptt):
                data, targets = get_batch(data_source, i)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    lr, clip, best_val_loss = 20.0, 0.25, None
    record = {"losses": [], "norms": [], "val": [], "lr": []}
    save = os.path.join(tempfile.mkdtemp(), "model.pt")
    torch.manual_seed(1111)                                 # dropout's masks: drawn from here on
    for _ in range(3):
        model.train()
        hidden = model.init_hidden(batch_size)
        for i in range(0, train_data.size(0) - 1, bptt):
            data, targets = get_batch(train_data, i)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            record["norms"].append(torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item())
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            record["losses"].append(loss.item())
        val_loss = evaluate(val_data)
        if best_val_loss is None or val_loss < best_val_loss:
            with open(save, "wb") as f:
                torch.save(model.state_dict(), f)
            best_val_loss = val_loss
        else:
            lr /= 4.0                                       # anneal when validation stops improving
        record["val"].append(val_loss)
        record["lr"].append(lr)
    record["hidden"] = [h.detach().cpu().numpy() for h in hidden]
    record["params"] = parameters(model)

    model = rnn_model(torch).to(device)                     # the best model, back from its file
    with open(save, "rb") as f:
        model.load_state_dict(torch.load(f))
    os.remove(save)
    model.rnn.flatten_parameters()
    record["test"] = evaluate(test_data)

    torch.manual_seed(1111)                                 # generate.py: words drawn from the model
    model.eval()
    hidden = model.init_hidden(1)
    tokens = torch.randint(model.ntoken, (1, 1), dtype=torch.long).to(device)
    record["words"] = []
    with torch.no_grad():
        for _ in range(6):
            output, hidden = model(tokens, hidden)
            word_weights = output.squeeze().div(0.7).exp().cpu()
            word_idx = torch.multinomial(word_weights, 1)[0]
            tokens.fill_(word_idx)
            record["words"].append(dictionary.idx2word[word_idx])
    return record


@pytest.mark.parametrize("device", DEVICES)
def test_word_language_model_trains_as_torch_s(device, monkeypatch):
    """Embedding (tied to the decoder) -> 2-layer LSTM -> Linear -> log_softmax, with dropout, NLLLoss; batchify's
    narrow, view, t and contiguous; truncated BPTT with repackaged (detached) hidden states; clip_grad_norm_; SGD by
    hand through p.data.add_(p.grad, alpha=-lr); evaluation under no_grad, lr divided by 4 when validation stops
    improving; the best state dict saved to and loaded from a file object, flatten_parameters; generate.py's
    sampling (multinomial over exp of the log-probabilities, fill_ with a 0-d tensor, a list indexed by one)."""
    ours = run_both(word_language_model, rnn_model, device, monkeypatch)
    assert ours["lr"][-1] < 20.0                            # the annealing branch ran
    assert list(ours["params"]) == ["encoder.weight", *(f"rnn.{k}_l{n}" for n in range(2) for k in (
        "weight_ih", "weight_hh", "bias_ih", "bias_hh")), "decoder.bias"]


# --- 4. nanoGPT: a small GPT, trained, checkpointed and resumed ------------------------------------------------------

GPTConfig = namedtuple("GPTConfig", ["block_size", "vocab_size", "n_layer", "n_head", "n_embd", "dropout", "bias"])
GPT_CONFIG = GPTConfig(block_size=8, vocab_size=13, n_layer=2, n_head=2, n_embd=16, dropout=0.1, bias=False)


def gpt_model(torch, config=GPT_CONFIG):
    nn, F = torch.nn, torch.nn.functional

    class LayerNorm(nn.Module):
        """LayerNorm with an optional bias (nn.LayerNorm's bias=False came later)."""

        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)     # q, k, v in one
            self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
            self.attn_dropout, self.resid_dropout = nn.Dropout(config.dropout), nn.Dropout(config.dropout)
            self.n_head, self.n_embd = config.n_head, config.n_embd
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)         # (B, nh, T, hs)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)             # heads side by side again
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
            self.dropout = nn.Dropout(config.dropout)

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1, self.attn = LayerNorm(config.n_embd, config.bias), CausalSelfAttention(config)
            self.ln_2, self.mlp = LayerNorm(config.n_embd, config.bias), MLP(config)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, bias=config.bias)))
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight                     # weight tying
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():                                 # scaled residual projections
                if pn.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def get_num_params(self):
            return sum(p.numel() for p in self.parameters()) - self.transformer.wpe.weight.numel()

        def forward(self, idx, targets=None):
            b, t = idx.size()
            assert t <= self.config.block_size
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            if targets is not None:
                logits = self.lm_head(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            else:
                logits, loss = self.lm_head(x[:, [-1], :]), None                  # the last position only
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
            param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
            decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]      # matrices and embeddings
            nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]     # gains and biases
            optim_groups = [{"params": decay_params, "weight_decay": weight_decay},
                            {"params": nodecay_params, "weight_decay": 0.0}]
            fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
            extra_args = dict(fused=True) if fused_available and device_type == "cuda" else dict()
            return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
                logits, _ = self(idx_cond)
                logits = logits[:, -1, :] / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("Inf")
                probs = F.softmax(logits, dim=-1)
                idx_next = torch.multinomial(probs, num_samples=1)
                idx = torch.cat((idx, idx_next), dim=1)
            return idx

    return GPT(config)


def nano_gpt(torch, device, weights):
    config, dtype, device_type = GPT_CONFIG, "float32", "cuda" if "cuda" in str(device) else "cpu"
    batch_size, gradient_accumulation_steps, grad_clip, eval_interval, eval_iters = 3, 2, 1.0, 2, 1
    learning_rate, min_lr, warmup_iters, lr_decay_iters, max_iters, resume_at = 6e-3, 6e-4, 2, 4, 5, 3
    torch.backends.cuda.matmul.allow_tf32 = True            # train.py's switches (float32 products stay float32
    torch.backends.cudnn.allow_tf32 = True                  # on a cpu, and in lapis)
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    ctx = contextlib.nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type,
                                                                                    dtype=ptdtype)
    data_dir = tempfile.mkdtemp()                           # prepare.py's train.bin and val.bin: uint16 tokens
    for split, length in (("train", 64), ("val", 24)):
        tokens = [(i * 5 + i // 13 + len(split)) % config.vocab_size for i in range(length)]
        np.array(tokens, dtype=np.uint16).tofile(os.path.join(data_dir, f"{split}.bin"))

    def get_batch(split):
        data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - config.block_size, (batch_size,))
        x = torch.stack([torch.from_numpy((data[i:i + config.block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + config.block_size]).astype(np.int64)) for i in ix])
        if device_type == "cuda":
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x.to(device), y.to(device)

    @torch.no_grad()
    def estimate_loss(model):
        out = {}
        model.eval()
        for split in ["train", "val"]:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    def get_lr(it):
        """Linear warmup, then cosine decay down to min_lr."""
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) * (learning_rate - min_lr)

    def train(model, optimizer, scaler, start, stop, record):
        torch.manual_seed(1337 + start)                     # batches and dropout: a resumed run draws the same
        X, Y = get_batch("train")
        model.train()
        for iter_num in range(start, stop):
            lr = get_lr(iter_num)
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr
            if iter_num % eval_interval == 0:
                losses = estimate_loss(model)
                record["evals"].append([losses["train"].item(), losses["val"].item()])
            for _ in range(gradient_accumulation_steps):
                with ctx:
                    logits, loss = model(X, Y)
                    loss = loss / gradient_accumulation_steps
                X, Y = get_batch("train")                   # the next batch, while the GPU works
                scaler.scale(loss).backward()
            if grad_clip != 0.0:
                scaler.unscale_(optimizer)
                record["norms"].append(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip).item())
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            record["losses"].append(loss.item() * gradient_accumulation_steps)
        assert tuple(logits.shape) == (batch_size, config.block_size, config.vocab_size)

    model_args = dict(config._asdict())
    model = gpt_model(torch, config).to(device)
    load_numpy_state(torch, model, weights)
    optimizer = model.configure_optimizers(0.1, learning_rate, (0.9, 0.95), device_type)
    scaler = torch.amp.GradScaler("cuda", enabled=(dtype == "float16"))
    record = {"params_count": model.get_num_params(), "losses": [], "norms": [], "evals": []}
    train(model, optimizer, scaler, 0, resume_at, record)
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "model_args": model_args,
                  "iter_num": resume_at, "best_val_loss": estimate_loss(model)["val"],
                  "config": {"batch_size": batch_size, "learning_rate": learning_rate, "decay_lr": True}}
    ckpt_path = os.path.join(data_dir, "ckpt.pt")
    torch.save(checkpoint, ckpt_path)
    train(model, optimizer, scaler, resume_at, max_iters, record)                # the run goes on ...

    checkpoint = torch.load(ckpt_path, map_location=device)                      # ... and is resumed
    resumed = gpt_model(torch, GPTConfig(**checkpoint["model_args"])).to(device)
    state_dict = checkpoint["model"]
    unwanted_prefix = "_orig_mod."                          # what torch.compile's wrapper adds to the names
    for k in list(state_dict):
        if k.startswith(unwanted_prefix):
            state_dict[k[len(unwanted_prefix):]] = state_dict.pop(k)
    resumed.load_state_dict(state_dict)
    resumed_optimizer = resumed.configure_optimizers(0.1, learning_rate, (0.9, 0.95), device_type)
    resumed_optimizer.load_state_dict(checkpoint["optimizer"])
    record["best_val_loss"] = checkpoint["best_val_loss"].item()
    resumed_record = {"losses": [], "norms": [], "evals": []}
    train(resumed, resumed_optimizer, scaler, checkpoint["iter_num"], max_iters, resumed_record)
    assert resumed_record["losses"] == record["losses"][resume_at:]
    assert resumed_record["norms"] == record["norms"][resume_at:]
    for (name, a), b in zip(parameters(resumed).items(), parameters(model).values(), strict=True):
        assert np.array_equal(a, b), name

    model.eval()
    torch.manual_seed(42)
    start = torch.zeros((1, 1), dtype=torch.long, device=device)
    record["generated"] = model.generate(start, 10, temperature=0.8, top_k=5)[0].tolist()
    record["params"] = parameters(model)
    record["groups"] = [len(g["params"]) for g in optimizer.param_groups]
    return record


@pytest.mark.parametrize("device", DEVICES)
def test_nano_gpt_trains_checkpoints_and_resumes_as_torch_s(device, monkeypatch):
    """Token and position embeddings, causal self-attention over a registered tril buffer with masked_fill(-inf),
    LayerNorm without bias, GELU MLP, dropout, the embedding tied to the head, nanoGPT's init; batches from a memmap
    of uint16 tokens (pinned on a GPU), the float32 autocast context on a GPU, gradient accumulation, AdamW over decay
    and no-decay groups with a warmup-cosine lr set per group, GradScaler (disabled), clip_grad_norm_, estimate_loss
    under @no_grad; torch.save of model, optimizer, step and best loss, torch.load into fresh objects that continue
    exactly as the original; generate with top-k."""
    switches = [(lib.backends.cuda.matmul, lib.backends.cudnn) for lib in (torch, lapis)]
    before = [(matmul.allow_tf32, cudnn.allow_tf32) for matmul, cudnn in switches]
    try:
        ours = run_both(nano_gpt, gpt_model, device, monkeypatch)
    finally:                                                # the program's switches go back as they were
        for (matmul, cudnn), (was_matmul, was_cudnn) in zip(switches, before, strict=True):
            matmul.allow_tf32, cudnn.allow_tf32 = was_matmul, was_cudnn
    assert "transformer.wte.weight" in ours["params"] and "lm_head.weight" not in ours["params"]    # tied: once
    assert ours["groups"] == [2 * 4 + 2, 2 * 2 + 1]
