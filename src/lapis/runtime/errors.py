"""Layer 2: the runtime's errors, as ROCr reports hsa_status_t error codes.

Each is a builtin `RuntimeError` too, so code that catches that keeps working.
"""


class HsaError(RuntimeError):
    """An error the runtime reports; `status` names its hsa_status_t code."""
    status = "HSA_STATUS_ERROR"


class OutOfMemory(HsaError, MemoryError):
    """A pool could not give the memory asked for (HSA_STATUS_ERROR_OUT_OF_RESOURCES)."""
    status = "HSA_STATUS_ERROR_OUT_OF_RESOURCES"
