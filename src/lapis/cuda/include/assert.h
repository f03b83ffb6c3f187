// lapis: <assert.h> for NVRTC, which ships no C library headers: a failed assert traps (lapis reports a
// device-side assert, naming the kernel's line when it was compiled with -lineinfo), as CUDA's assert stops the
// kernel; NDEBUG turns it off.
#pragma once
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define assert(e) ((e) ? (void)0 : __trap())
#endif
