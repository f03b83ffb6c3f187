"""`lapis.nn.init`, torch.nn.init's place (the code is `lapis.framework.nn.init`)."""

from lapis.framework.nn.init import *  # noqa: F403
from lapis.framework.nn.init import __all__  # noqa: F401
