"""Layer 5: torch.distributed's entry points, so that programs which import it and ask whether it is usable run on
one process. lapis has no process groups yet: `is_available()` is False (torch's answer on a build without
distributed support), and starting a group raises, saying so."""


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False


def _missing(*args, **kwargs):
    raise RuntimeError("lapis.distributed has no process groups yet (is_available() is False): run on one process")


init_process_group = destroy_process_group = barrier = all_reduce = broadcast = all_gather = _missing


def get_rank(group=None) -> int:
    _missing()


def get_world_size(group=None) -> int:
    _missing()


__all__ = ["all_gather", "all_reduce", "barrier", "broadcast", "destroy_process_group", "get_rank", "get_world_size",
           "init_process_group", "is_available", "is_initialized"]
