// lapis: <math.h> for NVRTC, which ships no C library headers: CUDA's math functions (sqrtf, expf, ...) are
// NVRTC's own, and INFINITY and NAN are defined here, as the C library defines them.
#pragma once
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
