"""attn.hf: libattn as a Hugging Face transformers attention implementation.

    import attn.hf
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation=attn.hf.register())

transformers builds its masks per implementation: an attention function
registered in AttentionInterface alone is handed attention_mask=None, and
the padding of a batch is then silently ignored (left-padded logits off by
whole units, no error).  register() therefore registers the function and
its mask function (AttentionMaskInterface: transformers' boolean sdpa mask,
True = may attend, which carries padding, sliding windows and packing)
under one name and returns that name.  attention_forward checks at every
call that its implementation has a mask function, and refuses to run when
it does not, naming the fix.

What the function takes from transformers' call: the mask (bool or
additive float), scaling, is_causal (as transformers' sdpa decides it:
causal only without a mask and with more than one query), softcap (Gemma 2's
attn_logit_softcapping), s_aux (gpt-oss's sinks, with a gradient), GQA by
key/value heads.  Gradients flow (attn.torch's autograd Function); dropout
must be 0 (model.eval(), or attention_dropout=0); weights are not returned
(as transformers' sdpa: None).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from . import _core
from .torch import scaled_dot_product_attention

__all__ = ["register", "attention_forward", "NAME"]

#: The name register() uses unless told otherwise.
NAME = "attn"


def _mask_registered(module: Any) -> Optional[str]:
    """The implementation's name when it has no mask function, else None."""
    from transformers.masking_utils import AttentionMaskInterface

    config = getattr(module, "config", None)
    name = getattr(config, "_attn_implementation", None)
    if name is None or name in ("sdpa", "eager"):
        return None
    if name in AttentionMaskInterface._global_mapping:
        return None
    return name


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    is_causal: Optional[bool] = None,
    softcap: Optional[float] = None,
    s_aux: Optional[torch.Tensor] = None,
    position_bias: Optional[torch.Tensor] = None,
    **kwargs: Any,
):
    """transformers' attention-function signature: query [B, Hq, L, D],
    key/value [B, Hkv, S, D]; returns (out [B, L, Hq, Dv], None)."""
    missing = _mask_registered(module)
    if missing is not None:
        raise _core.ArgumentError(
            f"attn.hf: attention implementation {missing!r} has no mask function in transformers' "
            f"AttentionMaskInterface, so transformers passes attention_mask=None and a padded batch "
            f"would be computed without its padding; register with attn.hf.register({missing!r}) "
            f"(both interfaces), or AttentionMaskInterface.register({missing!r}, "
            f"transformers.masking_utils.sdpa_mask)"
        )
    if position_bias is not None:
        raise _core.UnsupportedError("attn.hf: position_bias (T5-style) is not supported; use 'sdpa'")
    q_length = query.shape[2]
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    # transformers' sdpa rule: the causal flag only stands in for a mask
    # that was skipped, and a single query sees every key.
    causal = bool(q_length > 1 and attention_mask is None and is_causal)
    out = scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        is_causal=causal,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
        softcap=softcap,
        sinks=s_aux,
    )
    return out.transpose(1, 2).contiguous(), None


def register(name: str = NAME) -> str:
    """Registers attention_forward in transformers' AttentionInterface and
    transformers' sdpa mask function in AttentionMaskInterface, both under
    ``name``; returns ``name`` (for attn_implementation=)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string, got {name!r}")
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name
