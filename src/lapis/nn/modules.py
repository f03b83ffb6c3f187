"""`lapis.nn.modules`, torch.nn.modules's place (the code is `lapis.framework.nn.modules`)."""

from lapis.framework.nn.modules import *  # noqa: F403
from lapis.framework.nn.modules import __all__  # noqa: F401
