# attn._core: the private extension (python/src/attn_module.c); attn.sdpa is the API.
from typing import Any, Dict, Optional, Tuple

__version__: str  # attn_version() of the libattn linked in
header_version: str  # ATTN_VERSION_STRING the extension was compiled against
isa: str  # attn_isa_name(): "avx512", "avx2" or "generic"
F32: int
F16: int
BF16: int

Tensor = Tuple[Any, int]  # (a 4-D [B, L, H, D] buffer, attn_dtype code)

def sdpa_forward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, weights: Any = ..., lse: Any = ...,
                 **options: Any) -> None: ...
def sdpa_backward(q: Tensor, k: Tensor, v: Tensor, out: Optional[Tensor], lse: Any, dout: Tensor,
                  dq: Optional[Tensor], dk: Optional[Tensor], dv: Optional[Tensor],
                  **options: Any) -> None: ...
def sdpa_trace(q: Tensor, k: Tensor, v: Tensor, **options: Any) -> Dict[str, Tuple[bytearray, Tuple[int, ...], str]]: ...
def last_pointers() -> Dict[str, int]: ...
def raise_for_status(status: int, message: str) -> None: ...

from . import (ArgumentError, BudgetError, Error, FileError, FormatError, InternalError,
               NonFiniteError, OutOfMemoryError, ShapeError, SizeOverflowError,
               UnsupportedError, WaitTimeoutError)
