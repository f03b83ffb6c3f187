// lapis: <float.h> for NVRTC, which ships no C library headers: CCCL's <cuda/std/cfloat> defines the macros.
#pragma once
#include <cuda/std/cfloat>
