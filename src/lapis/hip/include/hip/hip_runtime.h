// lapis's hip/hip_runtime.h: HIP's kernel language on NVRTC, for lapis's simulated GPUs.
//
// lapis compiles HIP C++ with NVIDIA's NVRTC and assembles the PTX for either profile, so this header
// maps HIP's names onto CUDA's, as HIP's NVIDIA platform header (hip/nvidia_detail) does. Two things
// differ from that header, because the wave may be 64 lanes wide (mi300x):
//   - `warpSize` is the profile's wave size, a compile-time constant (__LAPIS_WARP_SIZE__, which
//     lapis.hip.RawModule passes: 64 for mi300x, 32 for h200), as hipcc fixes it per --offload-arch;
//   - the warp functions (__shfl*, __ballot, __activemask, and the *_sync spellings of HIP) follow
//     HIP's semantics over the whole wave: a `width` of warpSize by default, 64-bit masks and ballots.
#ifndef LAPIS_HIP_RUNTIME_H
#define LAPIS_HIP_RUNTIME_H

#ifndef __LAPIS_WARP_SIZE__
#define __LAPIS_WARP_SIZE__ 32
#endif
#if __LAPIS_WARP_SIZE__ != 32 && __LAPIS_WARP_SIZE__ != 64
#error "lapis HIP: __LAPIS_WARP_SIZE__ must be 32 or 64"
#endif

#define __HIP_PLATFORM_NVIDIA__ 1
#define __HIP_PLATFORM_NVCC__ 1
#define __HIPCC__ 1
#define __HIPCC_RTC__ 1
#define __HIP_DEVICE_COMPILE__ 1
#define __LAPIS_HIP__ 1
#define HIP_VERSION_MAJOR 6
#define HIP_VERSION_MINOR 2
#define HIP_VERSION_PATCH 0
#define HIP_VERSION (HIP_VERSION_MAJOR * 10000000 + HIP_VERSION_MINOR * 100000 + HIP_VERSION_PATCH)

// Every CUDA header that uses CUDA's own warpSize (cuda_fp16.h's shuffles) is read before warpSize is redefined.
#include <hip/hip_fp16.h>

// -- work-item coordinates ----------------------------------------------------------------------------------
#define hipThreadIdx_x threadIdx.x
#define hipThreadIdx_y threadIdx.y
#define hipThreadIdx_z threadIdx.z
#define hipBlockIdx_x blockIdx.x
#define hipBlockIdx_y blockIdx.y
#define hipBlockIdx_z blockIdx.z
#define hipBlockDim_x blockDim.x
#define hipBlockDim_y blockDim.y
#define hipBlockDim_z blockDim.z
#define hipGridDim_x gridDim.x
#define hipGridDim_y gridDim.y
#define hipGridDim_z gridDim.z

// -- kernel declarations --------------------------------------------------------------------------------------
#define HIP_KERNEL_NAME(...) __VA_ARGS__
#define HIP_SYMBOL(X) X
#define HIP_DYNAMIC_SHARED_ATTRIBUTE
#define HIP_DYNAMIC_SHARED(type, var) extern __shared__ type var[];
#define __HIP_DYNAMIC_SHARED(type, var) HIP_DYNAMIC_SHARED(type, var)
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif

// -- the wave ---------------------------------------------------------------------------------------------------
// CUDA's warpSize is a built-in variable (always 32 to NVRTC); HIP code sees the profile's wave size. CUDA declares
// its own (deprecated, 32-lane) __shfl, __shfl_down, __any, __ballot, ...: HIP's are other functions, and its
// *_sync spellings are HIP's (64-bit masks, width warpSize). The macros that say so are in lapis_names_on.h; the
// functions below call CUDA's own as (__ballot_sync)(...), which those function-like macros leave alone.
#include <hip/detail/lapis_names_on.h>

__device__ __forceinline__ unsigned int __lane_id() {
    unsigned int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

// A shuffle across the whole wave: lapis's SHFL spans the profile's wave (64 lanes on mi300x), so PTX's
// whole-warp form (c operand 0x1f, member mask 0xffffffff) reads any lane of it; `index` may be 0..warpSize-1.
__device__ __forceinline__ unsigned int __lapis_bpermute(unsigned int var, int index) {
    unsigned int out;
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(out) : "r"(var), "r"(index));
    return out;
}
// HIP's lane arithmetic (amd_warp_functions.h): a source outside the lane's width-wide section gives its own value.
__device__ __forceinline__ int __lapis_shfl_index(int src_lane, int width) {
    int self = (int)__lane_id();
    return (src_lane & (width - 1)) + (self & ~(width - 1));
}
__device__ __forceinline__ int __lapis_shfl_up_index(unsigned int delta, int width) {
    int self = (int)__lane_id();
    int index = self - (int)delta;
    return index < (self & ~(width - 1)) ? self : index;
}
__device__ __forceinline__ int __lapis_shfl_down_index(unsigned int delta, int width) {
    int self = (int)__lane_id();
    return (int)((self & (width - 1)) + delta) >= width ? self : self + (int)delta;
}
__device__ __forceinline__ int __lapis_shfl_xor_index(int lane_mask, int width) {
    int self = (int)__lane_id();
    int index = self ^ lane_mask;
    return index >= ((self + width) & ~(width - 1)) ? self : index;
}

#define __LAPIS_SHFL_32(T, FROM, TO)                                                                               \
    __device__ __forceinline__ T __shfl(T var, int src_lane, int width = warpSize) {                                \
        return TO(__lapis_bpermute(FROM(var), __lapis_shfl_index(src_lane, width))); }                             \
    __device__ __forceinline__ T __shfl_up(T var, unsigned int delta, int width = warpSize) {                       \
        return TO(__lapis_bpermute(FROM(var), __lapis_shfl_up_index(delta, width))); }                             \
    __device__ __forceinline__ T __shfl_down(T var, unsigned int delta, int width = warpSize) {                     \
        return TO(__lapis_bpermute(FROM(var), __lapis_shfl_down_index(delta, width))); }                           \
    __device__ __forceinline__ T __shfl_xor(T var, int lane_mask, int width = warpSize) {                           \
        return TO(__lapis_bpermute(FROM(var), __lapis_shfl_xor_index(lane_mask, width))); }
#define __LAPIS_SHFL_64(T)                                                                                         \
    __device__ __forceinline__ T __lapis_permute64(T var, int index) {                                             \
        unsigned long long bits = (unsigned long long)var;                                                         \
        unsigned int lo = __lapis_bpermute((unsigned int)bits, index);                                             \
        unsigned int hi = __lapis_bpermute((unsigned int)(bits >> 32), index);                                     \
        return (T)(((unsigned long long)hi << 32) | lo); }                                                         \
    __device__ __forceinline__ T __shfl(T var, int src_lane, int width = warpSize) {                                \
        return __lapis_permute64(var, __lapis_shfl_index(src_lane, width)); }                                      \
    __device__ __forceinline__ T __shfl_up(T var, unsigned int delta, int width = warpSize) {                       \
        return __lapis_permute64(var, __lapis_shfl_up_index(delta, width)); }                                      \
    __device__ __forceinline__ T __shfl_down(T var, unsigned int delta, int width = warpSize) {                     \
        return __lapis_permute64(var, __lapis_shfl_down_index(delta, width)); }                                    \
    __device__ __forceinline__ T __shfl_xor(T var, int lane_mask, int width = warpSize) {                           \
        return __lapis_permute64(var, __lapis_shfl_xor_index(lane_mask, width)); }

#define __LAPIS_SAME(x) (x)
__LAPIS_SHFL_32(int, (unsigned int), (int))
__LAPIS_SHFL_32(unsigned int, __LAPIS_SAME, __LAPIS_SAME)
__LAPIS_SHFL_32(float, __float_as_uint, __uint_as_float)
__LAPIS_SHFL_64(long long)
__LAPIS_SHFL_64(unsigned long long)
__LAPIS_SHFL_64(long)
__LAPIS_SHFL_64(unsigned long)
__device__ __forceinline__ double __shfl(double var, int src_lane, int width = warpSize) {
    return __longlong_as_double(__shfl(__double_as_longlong(var), src_lane, width)); }
__device__ __forceinline__ double __shfl_up(double var, unsigned int delta, int width = warpSize) {
    return __longlong_as_double(__shfl_up(__double_as_longlong(var), delta, width)); }
__device__ __forceinline__ double __shfl_down(double var, unsigned int delta, int width = warpSize) {
    return __longlong_as_double(__shfl_down(__double_as_longlong(var), delta, width)); }
__device__ __forceinline__ double __shfl_xor(double var, int lane_mask, int width = warpSize) {
    return __longlong_as_double(__shfl_xor(__double_as_longlong(var), lane_mask, width)); }
__device__ __forceinline__ __half __shfl(__half var, int src_lane, int width = warpSize) {
    return __ushort_as_half((unsigned short)__shfl((unsigned int)__half_as_ushort(var), src_lane, width)); }
__device__ __forceinline__ __half __shfl_up(__half var, unsigned int delta, int width = warpSize) {
    return __ushort_as_half((unsigned short)__shfl_up((unsigned int)__half_as_ushort(var), delta, width)); }
__device__ __forceinline__ __half __shfl_down(__half var, unsigned int delta, int width = warpSize) {
    return __ushort_as_half((unsigned short)__shfl_down((unsigned int)__half_as_ushort(var), delta, width)); }
__device__ __forceinline__ __half __shfl_xor(__half var, int lane_mask, int width = warpSize) {
    return __ushort_as_half((unsigned short)__shfl_xor((unsigned int)__half_as_ushort(var), lane_mask, width)); }

// Votes. vote.sync's `any` and `all` span the whole wave in lapis (over its active lanes), but its ballot is 32 bits
// (the low half of a 64-lane wave): the high half is built from one `any` vote per lane of it, which is exact
// under divergence too (an inactive lane's bit is 0), at the cost of 32 votes.
__device__ __forceinline__ int __any(int predicate) { return (__any_sync)(0xffffffffu, predicate); }
__device__ __forceinline__ int __all(int predicate) { return (__all_sync)(0xffffffffu, predicate); }
__device__ __forceinline__ unsigned long long __ballot(int predicate) {
    unsigned int lo = (__ballot_sync)(0xffffffffu, predicate);
#if __LAPIS_WARP_SIZE__ == 64
    unsigned int hi = 0, lane = __lane_id();
#pragma unroll
    for (unsigned int j = 0; j < 32; ++j)
        hi |= (unsigned int)((__any_sync)(0xffffffffu, predicate && lane == 32 + j) != 0) << j;
    return ((unsigned long long)hi << 32) | lo;
#else
    return lo;
#endif
}
__device__ __forceinline__ unsigned long long __lapis_activemask() { return __ballot(1); }

// -- the rest of HIP's device API that CUDA spells the same (__syncthreads, __threadfence, atomicAdd, ...,
// __launch_bounds__, the math library) comes with NVRTC; these are HIP's other spellings.
__device__ __forceinline__ unsigned long long __lapis_clock64() { return clock64(); }
#define wall_clock64() __lapis_clock64()

#endif  // LAPIS_HIP_RUNTIME_H
