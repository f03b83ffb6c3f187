"""Layer 5: learning-rate schedules (torch.optim.lr_scheduler's StepLR and CosineAnnealingLR)."""

import math


class _Scheduler:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]
        self.last_epoch = 0

    def step(self) -> None:
        self.last_epoch += 1
        for g, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            g["lr"] = lr

    def get_last_lr(self) -> list:
        return [g["lr"] for g in self.optimizer.param_groups]


class StepLR(_Scheduler):
    def __init__(self, optimizer, step_size: int, gamma: float = 0.1):
        super().__init__(optimizer)
        self.step_size, self.gamma = step_size, gamma

    def get_lr(self) -> list:
        return [lr * self.gamma ** (self.last_epoch // self.step_size) for lr in self.base_lrs]


class CosineAnnealingLR(_Scheduler):
    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0):  # noqa: N803 - torch's argument name
        super().__init__(optimizer)
        self.T_max, self.eta_min = T_max, eta_min

    def get_lr(self) -> list:
        return [self.eta_min + (lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for lr in self.base_lrs]

__all__ = ["StepLR", "CosineAnnealingLR"]
