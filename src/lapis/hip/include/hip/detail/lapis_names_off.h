// Undoes lapis_names_on.h, to read a CUDA header with CUDA's own names.
#undef warpSize
#undef __shfl
#undef __shfl_up
#undef __shfl_down
#undef __shfl_xor
#undef __any
#undef __all
#undef __ballot
#undef __shfl_sync
#undef __shfl_up_sync
#undef __shfl_down_sync
#undef __shfl_xor_sync
#undef __ballot_sync
#undef __activemask
#undef __any_sync
#undef __all_sync
#undef LAPIS_HIP_NAMES_ON
