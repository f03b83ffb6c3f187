"""`lapis.accelerator`, torch.accelerator's place (the code is `lapis.framework.accelerator`)."""

from lapis.framework.accelerator import *  # noqa: F403
from lapis.framework.accelerator import __all__  # noqa: F401
