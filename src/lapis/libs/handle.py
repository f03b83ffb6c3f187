"""Layer 4: what every library handle holds: an API (lapis.cuda or lapis.hip), a device and a stream.

    handle = blas.create(cuda)            # cublasCreate, cudnnCreate, ...: bound to device 0
    handle.set_stream(cuda.stream())      # cublasSetStream, cudnnSetStream: later routines launch there
    handle.get_stream()

A handle starts on the context's default stream. Routines launch their kernels on `handle.stream`,
so work on another stream may overlap them, and ordering against the caller's own launches is the
caller's business, as with the vendor libraries.
"""

from functools import cached_property

from lapis.cuda.api import DeviceProperties
from lapis.cuda.context import Stream


class LibraryHandle:
    def __init__(self, api, device: int = 0):
        self.api, self.device = api, device
        self._stream: Stream | None = None
        self._kernels: dict = {}                        # kernel function -> its dispatcher for this API

    def kernel(self, func):
        """The dispatcher of a kernel function for the handle's API, made at its first use (it compiles
        for each set of argument types at their first launch)."""
        dispatcher = self._kernels.get(func)
        if dispatcher is None:
            dispatcher = self._kernels[func] = self.api.jit(func)
        return dispatcher

    @property
    def context(self):
        return self.api.current_context(self.device)

    @cached_property
    def properties(self) -> DeviceProperties:
        """The device's properties, which routines tune by (shared memory per block, the profile)."""
        return self.api.get_device_properties(self.device)

    @property
    def stream(self) -> Stream:
        return self._stream if self._stream is not None else Stream(self.context)

    def set_stream(self, stream: Stream | None) -> None:
        """Launch later routines on `stream` (None or 0: the default stream again)."""
        if stream is None or stream == 0:
            self._stream = None
            return
        if not isinstance(stream, Stream):
            raise TypeError(f"set_stream takes a stream of this API, not {type(stream).__name__}")
        if stream.context is not self.context:
            raise ValueError(f"the stream belongs to {stream.context.device}, the handle to {self.context.device}")
        self._stream = stream

    def get_stream(self) -> Stream:
        return self.stream

    def device_time_ms(self, run) -> float:
        """Milliseconds of device time that what `run()` launches takes on the handle's stream, between
        two events, as cuBLASLt's and cuDNN's benchmarks time their candidates. It runs once untimed
        first: a kernel's first launch compiles it and copies its code to the device, and that copy
        would count."""
        run()
        start, end = self.api.event(), self.api.event()
        start.record(self.stream)
        run()
        end.record(self.stream)
        end.synchronize()
        return start.elapsed_time(end)
