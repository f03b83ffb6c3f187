// lapis's hip/hip_bf16.h: HIP's bfloat16 is CUDA's __nv_bfloat16 (cuda_bf16.h).
// The CUDA header is read with CUDA's own warpSize and warp functions, not HIP's (hip/detail/lapis_names_*.h).
#ifndef LAPIS_HIP_BF16_H
#define LAPIS_HIP_BF16_H
#ifdef LAPIS_HIP_NAMES_ON
#include <hip/detail/lapis_names_off.h>
#include <cuda_bf16.h>
#include <hip/detail/lapis_names_on.h>
#else
#include <cuda_bf16.h>
#endif
#endif
