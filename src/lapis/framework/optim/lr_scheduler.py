"""Layer 5: learning-rate schedules, torch.optim.lr_scheduler's.

Each schedule is a closed form of the epoch (`last_epoch`, counted by `step()`), as torch's `_get_closed_form_lr`:
the rate of each parameter group from its first rate (`initial_lr`, which the first schedule on an optimizer writes
into its groups). ReduceLROnPlateau instead lowers the rates when a watched metric stops improving.
"""

import bisect
import math


class LRScheduler:
    """A schedule: the subclass's `get_lr()` gives each group's rate at `last_epoch`; constructing applies epoch 0."""

    def __init__(self, optimizer, last_epoch: int = -1):
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        elif any("initial_lr" not in g for g in optimizer.param_groups):
            raise KeyError("param 'initial_lr' is not specified in param_groups when resuming an optimizer")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def step(self) -> None:
        self.last_epoch += 1
        for g, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            g["lr"] = lr

    def get_last_lr(self) -> list:
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        """Every attribute but the optimizer (and, as torch, functions: a LambdaLR's lambdas)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not callable(v)
                and not (isinstance(v, list) and any(callable(x) for x in v))}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)


class StepLR(LRScheduler):
    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        return [lr * self.gamma ** (self.last_epoch // self.step_size) for lr in self.base_lrs]


class MultiStepLR(LRScheduler):
    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        return [lr * self.gamma ** bisect.bisect_right(self.milestones, self.last_epoch) for lr in self.base_lrs]


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        return [lr * self.gamma ** self.last_epoch for lr in self.base_lrs]


class LambdaLR(LRScheduler):
    """Each group's first rate times `lr_lambda(epoch)` (one function, or one per group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        groups = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * groups
        if len(self.lr_lambdas) != groups:
            raise ValueError(f"Expected {groups} lr_lambdas, but got {len(self.lr_lambdas)}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        return [lr * f(self.last_epoch) for lr, f in zip(self.base_lrs, self.lr_lambdas, strict=True)]


class LinearLR(LRScheduler):
    """The first rate times a factor going linearly from `start_factor` to `end_factor` over `total_iters` epochs."""

    def __init__(self, optimizer, start_factor: float = 1 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and less or equal to 1.")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        done = min(self.total_iters, self.last_epoch) / self.total_iters
        return [lr * (self.start_factor + (self.end_factor - self.start_factor) * done) for lr in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803 - torch's
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        return [self.eta_min + (lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for lr in self.base_lrs]


class ReduceLROnPlateau:
    """Multiply every group's rate by `factor` (not below `min_lr`) once the metric given to `step(metric)` has not
    improved for more than `patience` epochs, then wait `cooldown` epochs; improving means below (mode "min") or
    above ("max") the best so far by `threshold`, relative ("rel") or absolute ("abs")."""

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0, min_lr=0.0,
                 eps: float = 1e-8):
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(f"mode {mode!r} or threshold mode {threshold_mode!r} is unknown")
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = threshold, threshold_mode, cooldown, eps
        groups = len(optimizer.param_groups)
        self.min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * groups
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs, self.cooldown_counter, self.last_epoch = 0, 0, 0

    def _better(self, value: float) -> bool:
        # torch's comparisons, written as they are there (the first best is infinite)
        if self.mode == "min":
            return value < (self.best * (1 - self.threshold) if self.threshold_mode == "rel"
                            else self.best - self.threshold)
        return value > (self.best * (1 + self.threshold) if self.threshold_mode == "rel"
                        else self.best + self.threshold)

    def step(self, metrics) -> None:
        value = float(metrics)
        self.last_epoch += 1
        if self._better(value):
            self.best, self.num_bad_epochs = value, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for g, floor in zip(self.optimizer.param_groups, self.min_lrs, strict=True):
                lowered = max(g["lr"] * self.factor, floor)
                if g["lr"] - lowered > self.eps:
                    g["lr"] = lowered
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0

    def get_last_lr(self) -> list:
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)


__all__ = ["CosineAnnealingLR", "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR", "MultiStepLR",
           "ReduceLROnPlateau", "StepLR"]
