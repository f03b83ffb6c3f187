"""Layer 3: the kernel-language names a kernel may use (numba.cuda's), as marker objects.

Outside a kernel they do nothing but explain themselves; the compiler recognises them by
identity and turns them into instructions (special registers, barriers, shared memory).
"""


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
laneid = Intrinsic("cuda.laneid", "the thread's lane within its warp")
warpsize = Intrinsic("cuda.warpsize", "the warp size of the device")

ALL = {"threadIdx": threadIdx, "blockIdx": blockIdx, "blockDim": blockDim, "gridDim": gridDim, "grid": grid,
       "gridsize": gridsize, "syncthreads": syncthreads, "shared": shared, "local": local, "laneid": laneid,
       "warpsize": warpsize}
