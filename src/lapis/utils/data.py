"""`lapis.utils.data`, torch.utils.data's place (the code is `lapis.framework.data`)."""

from lapis.framework.data import *  # noqa: F403
from lapis.framework.data import __all__  # noqa: F401
