"""The harness of the whole-program tests (test_programs_text.py, test_programs_models.py): each program runs once with
`torch` and once with `lapis` as the module that `torch` names, the same code step for step, and the two runs'
records (losses, outputs, final parameters) must agree.

Each program is a plain function of the namespace and the device, and of the initial weights (a state dict of numpy
arrays that the test takes from the model PyTorch builds with its own initialisation, so both runs start alike).
Where a program draws random numbers (noise, actions, batches, shuffled orders), PyTorch's run draws them from
lapis's generators (`lapis_randomness`): the two libraries' streams differ by design (lapis draws on the host with
numpy), and the tests are about everything else being the same."""

import contextlib

import numpy as np
import torch

import lapis

DEVICES = ["cpu", "cuda"]


# --- the harness ---------------------------------------------------------------------------------------------------

def numpy_state(module) -> dict:
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_numpy_state(torch, module, state: dict) -> None:
    """The program's start: the shared initial weights, loaded as a checkpoint would be."""
    module.load_state_dict({k: torch.tensor(v) for k, v in state.items()})


def parameters(module) -> dict:
    return {name: p.detach().cpu().numpy().copy() for name, p in module.named_parameters()}


@contextlib.contextmanager
def lapis_randomness(monkeypatch):
    """While PyTorch runs a program, its random draws come from lapis's generators: torch.manual_seed seeds lapis's
    too, randn, randn_like, randint and multinomial (and so Categorical.sample) return lapis's draws, dropout (and so
    nn.Dropout) multiplies by the mask lapis's dropout draws for that shape, and a RandomSampler takes its order from
    lapis's sampler over a lapis Generator seeded as the torch one was."""
    twins = {}

    def twin(generator):
        if generator is None:
            return None
        if id(generator) not in twins:
            twins[id(generator)] = (generator, lapis.Generator().manual_seed(generator.initial_seed()))
        return twins[id(generator)][1]

    def converted(draw, dtype=None, device=None, **_):
        out = torch.from_numpy(draw.numpy())
        return out.to(dtype) if dtype is not None else out

    def dropout(x, p=0.5, training=True, inplace=False):
        if not training or p == 0:
            return x
        mask = torch.from_numpy(lapis.nn.functional.dropout(lapis.ones(*x.shape), p).numpy())   # 0 or 1 / (1 - p)
        return x.mul_(mask) if inplace else x * mask

    real_seed = torch.manual_seed
    with monkeypatch.context() as patch:
        patch.setattr(torch, "manual_seed", lambda seed: (lapis.manual_seed(seed), real_seed(seed))[1])
        patch.setattr(torch, "randn", lambda *size, **kw: converted(lapis.randn(*size), **kw))
        patch.setattr(torch, "randn_like", lambda t, **kw: converted(lapis.randn(*t.shape), t.dtype))
        patch.setattr(torch, "randint", lambda *args, dtype=None, device=None, **kw: converted(
            lapis.randint(*args, **kw), dtype))
        patch.setattr(torch, "multinomial", lambda probs, num_samples, replacement=False, generator=None: converted(
            lapis.multinomial(lapis.tensor(probs.detach().numpy()), num_samples, replacement)))
        patch.setattr(torch.nn.functional, "dropout", dropout)
        patch.setattr(torch.utils.data.RandomSampler, "__iter__", lambda self: iter(lapis.utils.data.RandomSampler(
            self.data_source, self.replacement, self._num_samples, twin(self.generator))))
        yield


def agree(ours, theirs, where="result", rtol=1e-4, atol=1e-5):
    """Two runs' records agree: the same structure, equal integers and strings, floats and arrays close (arrays
    of the same shape and dtype)."""
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs), where
        for key in theirs:
            agree(ours[key], theirs[key], f"{where}[{key!r}]", rtol, atol)
    elif isinstance(theirs, list | tuple):
        assert len(ours) == len(theirs), f"{where}: {len(ours)} items, PyTorch's {len(theirs)}"
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            agree(a, b, f"{where}[{i}]", rtol, atol)
    elif isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray) and ours.shape == theirs.shape, f"{where}: {np.shape(ours)}"
        assert ours.dtype == theirs.dtype, f"{where}: {ours.dtype}, PyTorch's {theirs.dtype}"
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, err_msg=where)
    elif isinstance(theirs, float):
        assert isinstance(ours, float), f"{where}: {ours!r}"
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, err_msg=where)
    else:
        assert type(ours) is type(theirs) and ours == theirs, f"{where}: {ours!r}, PyTorch's {theirs!r}"


def run_both(program, model, device, monkeypatch, **tolerance):
    """PyTorch's run of `program` on its cpu and lapis's on `device`, from the weights PyTorch's `model` starts
    with; the records must agree."""
    torch.manual_seed(0)
    weights = numpy_state(model(torch))
    lapis.manual_seed(1)
    with lapis_randomness(monkeypatch):
        theirs = program(torch, "cpu", weights)
    lapis.manual_seed(1)
    ours = program(lapis, device, weights)
    agree(ours, theirs, **tolerance)
    return ours
