"""Layer 5: torch.nn.parallel's names. lapis runs a model on one device, so DataParallel is what torch's is with one
device: the module itself, called through the wrapper (`.module` is the wrapped model). Several devices and
DistributedDataParallel are not here yet: constructing one says so."""

from lapis.framework.nn.modules import Module


class DataParallel(Module):
    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        if device_ids is not None and len(device_ids) > 1:
            raise NotImplementedError("DataParallel over several devices is not supported yet: lapis runs a model "
                                      "on one device (pass one device id, or none)")
        self.module, self.device_ids, self.output_device, self.dim = module, device_ids, output_device, dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


class DistributedDataParallel(Module):
    def __init__(self, module: Module, *args, **kwargs):
        raise NotImplementedError("DistributedDataParallel is not supported yet (lapis.distributed has no process "
                                  "groups); train on one device, or wrap the model in DataParallel")


__all__ = ["DataParallel", "DistributedDataParallel"]
