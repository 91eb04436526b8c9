# attn.torch: PyTorch's scaled_dot_product_attention on libattn.
#   query [N, ..., Hq, L, E]  key [N, ..., Hkv, S, E]  value [N, ..., Hkv, S, Ev]
#   attn_mask: bool (True = may attend) or float (added), broadcastable to [N, ..., Hq, L, S]
#   returns [N, ..., Hq, L, Ev]
from typing import Optional, Tuple

import torch

def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Optional[torch.Tensor] = ...,
    dropout_p: float = ...,  # must be 0.0
    is_causal: bool = ...,  # top-left
    scale: Optional[float] = ...,  # > 0, default 1/sqrt(E)
    enable_gqa: bool = ...,
    *,
    window_size: Optional[Tuple[int, int]] = ...,  # (left, right), -1 = unbounded
    softcap: Optional[float] = ...,  # > 0
    alibi_slopes: Optional[torch.Tensor] = ...,  # [Hq], constants
    sinks: Optional[torch.Tensor] = ...,  # [Hq], with a gradient
    key_lengths: Optional[torch.Tensor] = ...,  # [N] integers
) -> torch.Tensor: ...
