// lapis: <limits.h> for NVRTC, which ships no C library headers: CCCL's <cuda/std/climits> defines the macros.
#pragma once
#include <cuda/std/climits>
