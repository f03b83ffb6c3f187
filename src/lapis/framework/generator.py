"""Layer 5: the framework's random number generator (torch's default generator), seeded by `manual_seed`.

Random tensors, dropout masks and `nn.init` values are drawn from it on the host and copied to the device;
PyTorch generates them on the device. A `Generator` (torch's spelling: `Generator().manual_seed(42)`) or a numpy
`Generator` passed as `generator=` is used instead.
"""

import numpy as np

from lapis import cuda

_default = [np.random.default_rng(0)]


def default_generator() -> np.random.Generator:
    return _default[0]


def manual_seed(seed: int) -> None:
    _default[0] = np.random.default_rng(seed)


cuda._seed_hooks.append(manual_seed)            # torch.cuda.manual_seed(_all) seeds this generator too


class Generator:
    """torch.Generator: a seedable stream of random numbers of its own, for `generator=` (a numpy Generator
    underneath, whose methods it answers)."""

    def __init__(self, device="cpu"):
        self.device = device
        self.manual_seed(int(np.random.SeedSequence().entropy % (1 << 63)))

    def manual_seed(self, seed: int) -> "Generator":
        self._seed, self._rng = int(seed), np.random.default_rng(int(seed))
        return self

    def seed(self) -> int:
        """Reseed from fresh entropy; returns the new seed."""
        return self.manual_seed(int(np.random.SeedSequence().entropy % (1 << 63)))._seed

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        return self._rng.bit_generator.state

    def set_state(self, state) -> "Generator":
        self._rng.bit_generator.state = state
        return self

    def __getattr__(self, name: str):             # integers, random, standard_normal, choice, permutation ...
        return getattr(self.__dict__["_rng"], name)
