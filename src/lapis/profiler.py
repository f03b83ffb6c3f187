"""`lapis.profiler`, torch.profiler's place: the framework's profiler (`lapis.framework.profiler`) under the name
users import."""

from lapis.framework.profiler import *  # noqa: F403
from lapis.framework.profiler import __all__  # noqa: F401
