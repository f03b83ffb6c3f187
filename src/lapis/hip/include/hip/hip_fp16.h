// lapis's hip/hip_fp16.h: HIP's half precision is CUDA's __half and __half2 (cuda_fp16.h), as on HIP's NVIDIA
// platform. cuda_fp16.h is read with CUDA's warpSize (its shuffles' default width), not HIP's macro.
#ifndef LAPIS_HIP_FP16_H
#define LAPIS_HIP_FP16_H
#ifdef LAPIS_HIP_NAMES_ON
#include <hip/detail/lapis_names_off.h>
#include <cuda_fp16.h>
#include <hip/detail/lapis_names_on.h>
#else
#include <cuda_fp16.h>
#endif
#endif
