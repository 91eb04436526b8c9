# attn.hf: libattn as a transformers attention implementation, registered with its mask.
#   model = AutoModelForCausalLM.from_pretrained(name, attn_implementation=attn.hf.register())
from typing import Any, Optional, Tuple

import torch

NAME: str

def register(name: str = ...) -> str: ...  # AttentionInterface + AttentionMaskInterface; returns name
def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, Hq, L, D]
    key: torch.Tensor,  # [B, Hkv, S, D]
    value: torch.Tensor,  # [B, Hkv, S, Dv]
    attention_mask: Optional[torch.Tensor],  # bool (True = may attend) or float (added)
    dropout: float = ...,  # must be 0.0
    scaling: Optional[float] = ...,
    is_causal: Optional[bool] = ...,
    softcap: Optional[float] = ...,
    s_aux: Optional[torch.Tensor] = ...,  # [Hq] sinks
    position_bias: Optional[torch.Tensor] = ...,  # refused
    **kwargs: Any,
) -> Tuple[torch.Tensor, None]: ...  # ([B, L, Hq, Dv], None)
