"""`lapis.nn.parallel`, torch.nn.parallel's place (the code is `lapis.framework.nn.parallel`)."""

from lapis.framework.nn.parallel import *  # noqa: F403
from lapis.framework.nn.parallel import __all__  # noqa: F401
