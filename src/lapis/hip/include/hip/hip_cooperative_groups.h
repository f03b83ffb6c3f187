// lapis's hip/hip_cooperative_groups.h: HIP's cooperative groups are CUDA's (cooperative_groups.h); its tiles assume 32-lane warps, so on a 64-lane wave use thread_block (this_thread_block().sync()) and grid groups, not tiled_partition or coalesced_threads.
// The CUDA header is read with CUDA's own warpSize and warp functions, not HIP's (hip/detail/lapis_names_*.h).
#ifndef LAPIS_HIP_COOPERATIVE_GROUPS_H
#define LAPIS_HIP_COOPERATIVE_GROUPS_H
#ifdef LAPIS_HIP_NAMES_ON
#include <hip/detail/lapis_names_off.h>
#include <cooperative_groups.h>
#include <hip/detail/lapis_names_on.h>
#else
#include <cooperative_groups.h>
#endif
#endif
