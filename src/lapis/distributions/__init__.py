"""`lapis.distributions`, torch.distributions' place (the code is `lapis.framework.distributions`)."""

from lapis.framework.distributions import *  # noqa: F403
from lapis.framework.distributions import __all__  # noqa: F401
