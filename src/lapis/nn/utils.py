"""`lapis.nn.utils`, torch.nn.utils' place (the code is `lapis.framework.nn.utils`)."""

from lapis.framework.nn.utils import *  # noqa: F403
from lapis.framework.nn.utils import __all__  # noqa: F401
