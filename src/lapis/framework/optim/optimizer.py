"""Layer 5: the optimizers' base (torch.optim.Optimizer): parameter groups, zero_grad, state dicts."""

import functools
from collections import defaultdict

from lapis import trace
from lapis.framework.autograd import no_grad


class Optimizer:
    def __init_subclass__(cls, **kwargs):
        # every optimizer's step is one event for the profiler, named as torch.profiler names it
        super().__init_subclass__(**kwargs)
        if "step" in cls.__dict__:
            step = cls.step

            @functools.wraps(step)
            def profiled(self, *args, **kw):
                with trace.span(5, f"Optimizer.step#{type(self).__name__}.step"):
                    return step(self, *args, **kw)
            cls.step = profiled

    def __init__(self, params, defaults: dict):
        params = list(params)
        groups = params if params and isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = [{**defaults, **g, "params": list(g["params"])} for g in groups]
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)   # parameter -> its state, as torch keys it (a tensor hashes by id)
        if not any(g["params"] for g in self.param_groups):
            raise ValueError("optimizer got an empty parameter list")

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    with no_grad():
                        p.grad.zero_()

    def _params(self):
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    yield g, p, self.state[p]

    def state_dict(self) -> dict:
        """torch's layout: each parameter numbered in group order; "state" maps a number to its parameter's state
        (only parameters that have one), "param_groups" holds each group's settings and its numbers."""
        number: dict[int, int] = {}
        groups = []
        for g in self.param_groups:
            numbers = [number.setdefault(id(p), len(number)) for p in g["params"]]
            groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": numbers})
        return {"state": {number[id(p)]: state for p, state in self.state.items() if id(p) in number},
                "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Take a state dict of this optimizer's layout (from `state_dict`, or PyTorch's loaded): each state tensor
        copied to its parameter's device (floating ones in its dtype, as torch does), a tensor step count as an
        int; the groups' settings replace this optimizer's."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        pairs = list(zip(self.param_groups, groups, strict=True))
        if any(len(ours["params"]) != len(theirs["params"]) for ours, theirs in pairs):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        params = {number: p for ours, theirs in pairs
                  for number, p in zip(theirs["params"], ours["params"], strict=True)}
        self.state = defaultdict(dict, {params[int(number)]: {key: _state_value(params[int(number)], key, value)
                                                              for key, value in state.items()}
                                        for number, state in state_dict["state"].items()})
        for ours, theirs in pairs:
            ours.update({k: (tuple(v) if k == "betas" else v) for k, v in theirs.items() if k != "params"})


def _state_value(p, key: str, value):
    """One entry of a loaded parameter state, ready for this optimizer to use."""
    if key == "step":
        return int(value.item()) if hasattr(value, "item") else int(value)
    if hasattr(value, "to"):
        dtype = p.dtype if value.dtype.is_floating_point else value.dtype
        return value.to(p.device, dtype, copy=True)
    return value
