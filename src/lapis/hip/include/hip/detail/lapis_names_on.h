// lapis's HIP names that hide CUDA's: warpSize, and the warp functions. hip_runtime.h defines them;
// a wrapper of a CUDA header (hip_fp16.h, ...) reads that header with them off (lapis_names_off.h).
#define LAPIS_HIP_NAMES_ON 1
#define warpSize __LAPIS_WARP_SIZE__
// CUDA declares its own (deprecated, 32-lane) __shfl, __shfl_down, __any, __ballot, ...: HIP's are other functions.
#define __shfl __lapis_hip_shfl
#define __shfl_up __lapis_hip_shfl_up
#define __shfl_down __lapis_hip_shfl_down
#define __shfl_xor __lapis_hip_shfl_xor
#define __any __lapis_hip_any
#define __all __lapis_hip_all
#define __ballot __lapis_hip_ballot

// HIP's *_sync warp functions take a 64-bit member mask (not checked: lapis runs the whole wave in lockstep)
// and default `width` to HIP's warpSize, so they are HIP's own here, not CUDA's 32-lane ones.
#define __shfl_sync(mask, ...) __shfl(__VA_ARGS__)
#define __shfl_up_sync(mask, ...) __shfl_up(__VA_ARGS__)
#define __shfl_down_sync(mask, ...) __shfl_down(__VA_ARGS__)
#define __shfl_xor_sync(mask, ...) __shfl_xor(__VA_ARGS__)
#define __ballot_sync(mask, predicate) __ballot(predicate)
#define __activemask() __lapis_activemask()
#define __any_sync(mask, predicate) __any(predicate)
#define __all_sync(mask, predicate) __all(predicate)
