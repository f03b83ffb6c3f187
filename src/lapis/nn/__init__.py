"""`lapis.nn`, torch.nn's place: the framework's modules (`lapis.framework.nn`) under the name users import."""

from lapis.framework.nn import *  # noqa: F403
from lapis.framework.nn import __all__  # noqa: F401
