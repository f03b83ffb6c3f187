"""`lapis.amp`, torch.amp's place (the code is `lapis.framework.amp`)."""

from lapis.framework.amp import *  # noqa: F403
from lapis.framework.amp import __all__  # noqa: F401
