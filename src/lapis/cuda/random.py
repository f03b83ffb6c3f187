"""Layer 3: `lapis.cuda.random`, numba.cuda's random numbers: xoroshiro128+ generators, one state per thread.

    from lapis.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float32

    @cuda.jit
    def darts(states, hits):
        i = cuda.grid(1)
        x = xoroshiro128p_uniform_float32(states, i)
        y = xoroshiro128p_uniform_float32(states, i)
        hits[i] = x * x + y * y <= 1

    states = create_xoroshiro128p_states(n, seed=1)

xoroshiro128+ (Blackman and Vigna, the version with rotations 55 and 36 and shift 14, as numba's) gives 64-bit
numbers; a state's words are seeded from the seed by SplitMix64 and each thread's state is the one before it
jumped 2^64 steps, so the threads' sequences do not overlap. The states are made on the host (the jumps are a
sequential walk, compiled with numba's CPU compiler) and copied to the device; the same seed gives numba's
states and numba's numbers. The kernel language has no uint64, so the device functions keep the two words of a
state in an int64 array of shape (n, 2) (numba's is a record array of two uint64 fields, s0 and s1): the
arithmetic wraps alike, and the logical right shifts are arithmetic ones masked.
"""

import math

import numpy as np
from numba import njit
from numpy import float32, float64

from lapis.cuda.compiler.device_function import DeviceFunction

api = None              # the programming interface that copies states to the device (lapis.cuda sets it)
# The xoroshiro128+ jump polynomial: 2^64 steps of the generator.
JUMP = (0xBEAC0467EBA5FACB, 0xD86B048B86AA9922)
_MASK64 = (1 << 64) - 1


# -- on the host: seeding and jumping (numba's CPU compiler: n states each walk 128 steps) ---------------------
@njit(cache=True)
def _next_host(s):
    """Advance the state s (two uint64 words) by one step, as `xoroshiro128p_next`."""
    s0, s1 = s[0], s[1]
    s1 ^= s0
    s[0] = ((s0 << np.uint64(55)) | (s0 >> np.uint64(9))) ^ s1 ^ (s1 << np.uint64(14))
    s[1] = (s1 << np.uint64(36)) | (s1 >> np.uint64(28))


@njit(cache=True)
def _jump_host(s, jump):
    """Advance s by 2^64 steps: the xor of the states the jump polynomial's set bits pick."""
    t0, t1 = np.uint64(0), np.uint64(0)
    for word in jump:
        for b in range(64):
            if (word >> np.uint64(b)) & np.uint64(1):
                t0 ^= s[0]
                t1 ^= s[1]
            _next_host(s)
    s[0], s[1] = t0, t1


@njit(cache=True)
def _init_states(states, seed, subsequence_start, jump):
    """states[i] (two uint64 words) for n threads: SplitMix64 of the seed in both words, jumped
    subsequence_start times, then each state the one before it jumped once more."""
    z = seed + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    s = np.empty(2, np.uint64)
    s[0], s[1] = z, z
    for _ in range(subsequence_start):
        _jump_host(s, jump)
    for i in range(states.shape[0]):
        if i:
            _jump_host(s, jump)
        states[i, 0], states[i, 1] = s[0], s[1]


def init_xoroshiro128p_states(n: int, seed: int, subsequence_start: int = 0) -> np.ndarray:
    """The n states on the host, as (n, 2) int64 words: what `create_xoroshiro128p_states` copies."""
    if n < 0 or subsequence_start < 0:
        raise ValueError(f"xoroshiro128+ states: n ({n}) and subsequence_start ({subsequence_start}) must be >= 0")
    states = np.empty((n, 2), np.uint64)
    _init_states(states, np.uint64(seed & _MASK64), subsequence_start, np.array(JUMP, np.uint64))
    return states.view(np.int64)


def create_xoroshiro128p_states(n: int, seed: int, subsequence_start: int = 0, stream=0):
    """numba's create_xoroshiro128p_states: a device array of n generator states, one per thread, seeded from
    `seed`, each 2^64 steps after the one before (and the first `subsequence_start` jumps in)."""
    host = init_xoroshiro128p_states(n, seed, subsequence_start)
    return api.to_device(host, stream=stream)


# -- in kernels --------------------------------------------------------------------------------------------
@DeviceFunction
def _rotl(x, k):
    return (x << k) | ((x >> (64 - k)) & ((1 << k) - 1))


@DeviceFunction
def xoroshiro128p_next(states, index):
    """The next 64-bit number of states[index] (as an int64 holding its bits), advancing the state."""
    s0 = states[index, 0]
    s1 = states[index, 1]
    result = s0 + s1
    s1 ^= s0
    states[index, 0] = _rotl(s0, 55) ^ s1 ^ (s1 << 14)
    states[index, 1] = _rotl(s1, 36)
    return result


@DeviceFunction
def xoroshiro128p_uniform_float64(states, index):
    """A float64 in [0, 1) from the top 53 bits of the next number, as numba's."""
    return float64((xoroshiro128p_next(states, index) >> 11) & ((1 << 53) - 1)) * (1.0 / 9007199254740992.0)


@DeviceFunction
def xoroshiro128p_uniform_float32(states, index):
    """numba's float32 in [0, 1): the float64 one, rounded to float32."""
    return float32(xoroshiro128p_uniform_float64(states, index))


@DeviceFunction
def xoroshiro128p_normal_float32(states, index):
    """A standard normal float32 (Box-Muller on two uniforms; its second value is dropped, as numba's)."""
    u1 = xoroshiro128p_uniform_float32(states, index)
    u2 = xoroshiro128p_uniform_float32(states, index)
    return math.sqrt(float32(-2.0) * math.log(u1)) * math.cos(float32(2 * math.pi) * u2)


@DeviceFunction
def xoroshiro128p_normal_float64(states, index):
    """A standard normal float64: Box-Muller on two float32 uniforms, as numba's computes it (the logarithm of the
    float32 uniform in float32, the rest in float64)."""
    u1 = xoroshiro128p_uniform_float32(states, index)
    u2 = xoroshiro128p_uniform_float32(states, index)
    return math.sqrt(float64(-2.0) * math.log(u1)) * math.cos(float64(2 * math.pi) * u2)


__all__ = ["create_xoroshiro128p_states", "init_xoroshiro128p_states", "xoroshiro128p_next",
           "xoroshiro128p_normal_float32", "xoroshiro128p_normal_float64", "xoroshiro128p_uniform_float32",
           "xoroshiro128p_uniform_float64"]
