"""`lapis.nn.functional`, torch.nn.functional's place (the code is `lapis.framework.nn.functional`)."""

from lapis.framework.nn.functional import *  # noqa: F403
from lapis.framework.nn.functional import __all__  # noqa: F401
