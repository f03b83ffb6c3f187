"""`lapis.backends`, torch.backends' place: the switches programs set at the top (nanoGPT sets allow_tf32).

lapis's matrix products and convolutions compute float32 in float32 whatever these say (a GPU allowed TF32 would
round the inputs to 10 bits of mantissa), and its kernels are chosen and deterministic either way; the switches
keep what a program sets, so it reads back what it wrote.
"""

from types import SimpleNamespace

cuda = SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                                              allow_bf16_reduced_precision_reduction=True),
                       is_built=lambda: True, flash_sdp_enabled=lambda: True)
cudnn = SimpleNamespace(enabled=True, benchmark=False, deterministic=False, allow_tf32=True,
                        is_available=lambda: True, version=lambda: 90000)
mps = SimpleNamespace(is_available=lambda: False, is_built=lambda: False)

_float32_matmul_precision = ["highest"]


def set_float32_matmul_precision(precision: str) -> None:
    """torch's "highest", "high" or "medium" (kept; lapis's float32 products are "highest" in any case)."""
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"Invalid precision {precision!r}: expected 'highest', 'high' or 'medium'")
    _float32_matmul_precision[0] = precision


def get_float32_matmul_precision() -> str:
    return _float32_matmul_precision[0]


__all__ = ["cuda", "cudnn", "get_float32_matmul_precision", "mps", "set_float32_matmul_precision"]
