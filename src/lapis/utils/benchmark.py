"""`lapis.utils.benchmark`, torch.utils.benchmark's place (the code is `lapis.framework.benchmark`): `Timer` and
`Measurement`."""

from lapis.framework.benchmark import *  # noqa: F403
from lapis.framework.benchmark import __all__  # noqa: F401
