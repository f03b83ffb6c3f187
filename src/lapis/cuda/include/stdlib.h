// lapis: <stdlib.h> for NVRTC, which ships no C library headers: abs and the like are NVRTC's own; the host
// parts of stdlib are not for kernels.
#pragma once
