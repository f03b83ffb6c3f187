"""Layer 3: the kernel-language names a kernel may use (numba.cuda's), as marker objects.

Outside a kernel they do nothing but explain themselves; the compiler recognises them by
identity and turns them into instructions (special registers, barriers, shared memory).
"""


from lapis.cuda.compiler import types as T


class Intrinsic:
    def __init__(self, name: str, doc: str = ""):
        self.name = name
        self.__doc__ = doc

    def __repr__(self) -> str:
        return f"<lapis kernel intrinsic {self.name}>"

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.name} can only be used inside a @cuda.jit kernel")


class Dim3(Intrinsic):
    """threadIdx, blockIdx, blockDim or gridDim: read .x, .y and .z inside a kernel."""


class _Namespace:
    def __init__(self, name: str, **members):
        self.name = name
        for k, v in members.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        return f"<lapis kernel namespace {self.name}>"


threadIdx = Dim3("cuda.threadIdx")
blockIdx = Dim3("cuda.blockIdx")
blockDim = Dim3("cuda.blockDim")
gridDim = Dim3("cuda.gridDim")
grid = Intrinsic("cuda.grid", "cuda.grid(ndim): the absolute thread index (a tuple for ndim 2 and 3)")
gridsize = Intrinsic("cuda.gridsize", "cuda.gridsize(ndim): the number of threads in the grid")
syncthreads = Intrinsic("cuda.syncthreads", "barrier for every thread of the block")
shared = _Namespace("cuda.shared", array=Intrinsic("cuda.shared.array", "cuda.shared.array(shape, dtype)"))
local = _Namespace("cuda.local", array=Intrinsic("cuda.local.array", "cuda.local.array(shape, dtype)"))
const = _Namespace("cuda.const", array_like=Intrinsic(
    "cuda.const.array_like", "cuda.const.array_like(ary): a constant copy of a global numpy array, baked in"))
laneid = Intrinsic("cuda.laneid", "the thread's lane within its warp")
warpsize = Intrinsic("cuda.warpsize", "the warp size of the device")
syncwarp = Intrinsic("cuda.syncwarp", "cuda.syncwarp(mask=ALL): converge the lanes of the warp")
threadfence = Intrinsic("cuda.threadfence", "order this thread's memory accesses for the whole device")
threadfence_block = Intrinsic("cuda.threadfence_block", "order this thread's memory accesses for its block")
threadfence_system = Intrinsic("cuda.threadfence_system", "order this thread's memory accesses for the system")
atomic = _Namespace("cuda.atomic", **{name: Intrinsic(f"cuda.atomic.{name}", f"cuda.atomic.{name}(array, index, "
                                                      "value): atomically update array[index]; returns the old value")
                                      for name in ("add", "sub", "max", "min", "exch")},
                    **{name: Intrinsic(f"cuda.atomic.{name}", f"cuda.atomic.{name}(array, index, value): atomically "
                                       f"update array[index] to {name[3:]}(array[index], value), a NaN counting as "
                                       "missing (the hardware's minimumNumber/maximumNumber); returns the old value")
                       for name in ("nanmax", "nanmin")},
                    cas=Intrinsic("cuda.atomic.cas", "cuda.atomic.cas(array, index, old, value): compare and swap; "
                                  "returns the value array[index] held"),
                    compare_and_swap=Intrinsic("cuda.atomic.compare_and_swap", "cuda.atomic.compare_and_swap("
                                               "array, old, value): cas of array[0]"),
                    **{name: Intrinsic(f"cuda.atomic.{name}", f"cuda.atomic.{name}(array, index, value): atomically "
                                       f"update array[index] ({what}); returns the old value")
                       for name, what in (("and_", "&"), ("or_", "|"), ("xor", "^"),
                                          ("inc", "old >= value ? 0 : old + 1"),
                                          ("dec", "old == 0 or old > value ? value : old - 1"))})
shfl_sync = Intrinsic("cuda.shfl_sync", "cuda.shfl_sync(mask, value, src_lane): value of lane src_lane")
shfl_up_sync = Intrinsic("cuda.shfl_up_sync", "cuda.shfl_up_sync(mask, value, delta): value of lane - delta")
shfl_down_sync = Intrinsic("cuda.shfl_down_sync", "cuda.shfl_down_sync(mask, value, delta): value of lane + delta")
shfl_xor_sync = Intrinsic("cuda.shfl_xor_sync", "cuda.shfl_xor_sync(mask, value, lane_mask): value of lane ^ mask")
all_sync = Intrinsic("cuda.all_sync", "cuda.all_sync(mask, predicate): whether it holds on every active lane")
any_sync = Intrinsic("cuda.any_sync", "cuda.any_sync(mask, predicate): whether it holds on some active lane")
ballot_sync = Intrinsic("cuda.ballot_sync", "cuda.ballot_sync(mask, predicate): a bit per lane where it holds")
# Cooperative groups, as numba has them: the grid as a group, whose sync() is a barrier for every thread of the grid.
grid_group = _Namespace("cuda.cg.GridGroup", sync=Intrinsic(
    "cuda.cg.GridGroup.sync", "g.sync(): wait until every thread of the grid arrives (a kernel that calls it is "
    "launched cooperatively: every block resident at once)"))
cg = _Namespace("cuda.cg", this_grid=Intrinsic("cuda.cg.this_grid", "cuda.cg.this_grid(): the grid as a group"))
brev = Intrinsic("cuda.brev", "cuda.brev(x): the bits of a 32- or 64-bit integer in reverse order, unsigned")
clz = Intrinsic("cuda.clz", "cuda.clz(x): the leading zero bits of a 32- or 64-bit integer")
ffs = Intrinsic("cuda.ffs", "cuda.ffs(x): the position of a 32- or 64-bit integer's lowest set bit, from 1 (0 for 0)")
fma = Intrinsic("cuda.fma", "cuda.fma(a, b, c): a b + c rounded once (one FFMA or DFMA), in float32 or float64")
# libdevice's reciprocal (PTX's rcp.approx.f32), as math.exp2 is its 2^x: one instruction where x / y
# takes four, which is what the library's formulas were written with.
fast_rcp = Intrinsic("fast_rcp", "fast_rcp(x): 1 / x in float32 from the special function unit (one MUFU.RCP)")

mma = _Namespace(
    "cuda.mma",
    load=Intrinsic("cuda.mma.load", "cuda.mma.load(array, index, count): count (2 or 4) consecutive uint32 words, "
                   "or 4 float32 words, of a shared or global array as one fragment (a 64- or 128-bit load, as "
                   "CUDA C++ reads a float4); the element's address must be a multiple of count words"),
    store=Intrinsic("cuda.mma.store", "cuda.mma.store(array, index, fragment): a fragment's words to consecutive "
                    "words of a shared or global array in one 64- or 128-bit store; the element's address must be a "
                    "multiple of the fragment's words"),
    zeros=Intrinsic("cuda.mma.zeros", "cuda.mma.zeros(): a float32 accumulator fragment of four zeros"),
    mma_sync=Intrinsic("cuda.mma.mma_sync", "cuda.mma.mma_sync(a, b, c, dtype): D = A B + C for the warp's "
                       "16x8x16 tile (HMMA); a: four words of packed A halves, b: two of B, c: four float32; "
                       "dtype is cuda.float16 or cuda.bfloat16"),
    get=Intrinsic("cuda.mma.get", "cuda.mma.get(fragment, i): register i of a fragment (i a constant)"),
    pack=Intrinsic("cuda.mma.pack", "cuda.mma.pack(a, b, c, d): an f32x4 fragment of four float32 values, for a "
                   "128-bit store (CUDA C++'s make_float4)"),
    u32x2=T.u32x2, u32x4=T.u32x4, f32x4=T.f32x4,          # fragment types, for local.array(n, cuda.mma.f32x4)
)
