"""Layer 5: the framework's random number generator (torch's default generator), seeded by `manual_seed`.

Random tensors, dropout masks and `nn.init` values are drawn from it on the host and copied to the device;
PyTorch generates them on the device. A numpy `Generator` passed as `generator=` is used instead.
"""

import numpy as np

_default = [np.random.default_rng(0)]


def default_generator() -> np.random.Generator:
    return _default[0]


def manual_seed(seed: int) -> None:
    _default[0] = np.random.default_rng(seed)
