"""Layer 3: the errors of the programming interface, CUDA style."""


class CudaError(RuntimeError):
    """An error reported by the lapis CUDA/HIP API."""


class CudaSupportError(CudaError):
    """No device of the requested kind is present."""


class OutOfMemoryError(CudaError, MemoryError):
    """The device has no room for an allocation (like cudaErrorMemoryAllocation)."""


class InvalidHandleError(CudaError):
    """A stream or event that was destroyed, or that belongs to another device (like
    cudaErrorInvalidResourceHandle)."""


class LaunchError(CudaError):
    """A launch configuration the device cannot run (like cudaErrorInvalidConfiguration)."""


class LaunchOutOfResources(LaunchError):
    """A kernel that needs more of a thread's resources than the device has, such as local memory past its limit
    (cudaErrorLaunchOutOfResources, "too many resources requested for launch")."""


class KernelFault(CudaError):
    """A kernel stopped on the device (like cudaErrorIllegalAddress): names the kernel, the
    instruction, for memory faults the address, and the kernel's file and line where its code
    object keeps a line table (as compute-sanitizer does with -lineinfo)."""

    def __init__(self, message: str, kernel: str, pc: int | None = None, instruction: str | None = None,
                 address: int | None = None):
        super().__init__(message)
        self.kernel, self.pc, self.instruction, self.address = kernel, pc, instruction, address


# How the device words a kernel it stopped at its time limit (the command processor's message)
TIMED_OUT = "the launch timed out and was terminated"


def failure(exc: Exception) -> str:
    """What kind of failure an error is, in the words both of CUDA's error enums have a code for (the runtime API's
    cudaError_t and the driver's CUresult): illegal_address, assert, launch_timeout, launch_failed, out_of_memory,
    launch_out_of_resources, invalid_configuration, invalid_handle, invalid_device, or unknown."""
    if isinstance(exc, KernelFault):
        if exc.address is not None:
            return "illegal_address"
        if "device-side assert triggered" in str(exc):
            return "assert"
        return "launch_timeout" if TIMED_OUT in str(exc) else "launch_failed"
    for kind, name in ((OutOfMemoryError, "out_of_memory"), (LaunchOutOfResources, "launch_out_of_resources"),
                       (LaunchError, "invalid_configuration"), (InvalidHandleError, "invalid_handle"),
                       (CudaSupportError, "invalid_device")):
        if isinstance(exc, kind):
            return name
    return "launch_failed" if "faulted" in str(exc) else "unknown"      # an event behind a faulted kernel
