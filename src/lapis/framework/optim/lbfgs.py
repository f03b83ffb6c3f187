"""Layer 5: torch.optim.LBFGS, the limited-memory BFGS of torch's implementation (Nocedal and Wright's Algorithm
7.4, without a line search): each `step(closure)` runs up to `max_iter` iterations, each a direction from the last
`history_size` curvature pairs (the two-loop recursion) and a step of `lr` along it, re-evaluating the closure.

The parameters are handled as one flat vector (their gradients concatenated); every scalar the algorithm tests
(curvature, the directional derivative, the losses) is read back to the host, so each iteration is a few sync
points on a GPU, as it is in torch.
"""

from collections import defaultdict

from lapis.framework.autograd import enable_grad, no_grad
from lapis.framework.ops.views import cat
from lapis.framework.optim.optimizer import Optimizer


class LBFGS(Optimizer):
    """torch.optim.LBFGS(params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
    history_size=100, line_search_fn=None); one parameter group, as torch requires."""

    def __init__(self, params, lr: float = 1.0, max_iter: int = 20, max_eval=None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100, line_search_fn=None):
        if line_search_fn is not None:
            raise NotImplementedError("LBFGS's strong_wolfe line search is not supported yet (line_search_fn=None)")
        params = list(params)
        if params and isinstance(params[0], dict):
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval if max_eval is not None else max_iter * 5 // 4,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change, history_size=history_size,
                        line_search_fn=None)
        self.param_groups = [{**defaults, "params": params}]
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)

    @property
    def _flat_params(self) -> list:
        return self.param_groups[0]["params"]

    def _flat_grad(self):
        return cat([p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel())
                    for p in self._flat_params])

    def _add(self, step: float, direction) -> None:
        offset = 0
        for p in self._flat_params:
            n = p.numel()
            p.add_(direction[offset:offset + n].view_as(p) * step)
            offset += n

    @no_grad()
    def step(self, closure):
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change, history_size = (group["tolerance_grad"], group["tolerance_change"],
                                                          group["history_size"])
        state = self.state[self._flat_params[0]]                     # torch keeps it as the first parameter's
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._flat_grad()
        if float(flat_grad.abs().max()) <= tolerance_grad:
            return orig_loss
        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag, prev_flat_grad, prev_loss = state.get("H_diag"), state.get("prev_flat_grad"), state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:                    # the steepest descent first
                d, old_dirs, old_stps, ro, h_diag = -flat_grad, [], [], [], 1.0
            else:                                       # the two-loop recursion over the kept curvature pairs
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = float((y * s).sum())
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / float((y * y).sum())
                al = [0.0] * len(old_dirs)
                q = -flat_grad
                for i in range(len(old_dirs) - 1, -1, -1):
                    al[i] = float((old_stps[i] * q).sum()) * ro[i]
                    q = q - old_dirs[i] * al[i]
                r = q * h_diag
                for i in range(len(old_dirs)):
                    be_i = float((old_dirs[i] * r).sum()) * ro[i]
                    r = r + old_stps[i] * (al[i] - be_i)
                d = r
            prev_flat_grad = flat_grad.clone()
            prev_loss = loss
            t = min(1.0, 1.0 / float(flat_grad.abs().sum())) * lr if state["n_iter"] == 1 else lr
            gtd = float((flat_grad * d).sum())          # the directional derivative
            if gtd > -tolerance_change:
                break
            evals = 0
            self._add(t, d)
            if n_iter != max_iter:
                with enable_grad():
                    loss = float(closure())
                flat_grad = self._flat_grad()
                evals = 1
            current_evals += evals
            state["func_evals"] += evals
            if n_iter == max_iter or current_evals >= max_eval:
                break
            if float(flat_grad.abs().max()) <= tolerance_grad:
                break
            if float((d * t).abs().max()) <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                break
        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss
