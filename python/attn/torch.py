"""attn.torch: torch.nn.functional.scaled_dot_product_attention, computed by libattn.

    import attn.torch
    out = attn.torch.scaled_dot_product_attention(query, key, value, is_causal=True)

PyTorch's signature and semantics: query [N, ..., Hq, L, E], key
[N, ..., Hkv, S, E], value [N, ..., Hkv, S, Ev] -> [N, ..., Hq, L, Ev];
a boolean attn_mask is True where a query MAY attend, a float one is added
to the scores, both broadcast to [N, ..., Hq, L, S]; is_causal is the
top-left alignment; scale defaults to 1/sqrt(E); enable_gqa lets Hq be a
multiple of Hkv.  Gradients flow through attn's backward (a
torch.autograd.Function).  Differences from torch (docs/python.md): a
query row that sees no key gives 0, not NaN; dropout_p must be 0; CPU
tensors only, float32 computed (float16/bfloat16 passed through to
libattn, which refuses them until its kernels take them); no gradient for
a float attn_mask; scale must be positive.

Keyword extensions (attn's options, gradients included): window_size
(left, right), softcap, alibi_slopes [Hq], sinks [Hq] (a gradient of its
own), key_lengths [N]; docs/python.md.  L = 0 or S = 0 give what torch
gives (an empty output, or zeros).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from . import _core
from ._sdpa import sdpa as _sdpa
from ._sdpa import sdpa_backward as _sdpa_backward

__all__ = ["scaled_dot_product_attention", "model_logits"]


class _Attention(torch.autograd.Function):
    """attn.sdpa forward, attn.sdpa_backward backward, in torch's layout.
    sinks is the one option with a gradient (dsinks), so it travels as a
    tensor argument; the others are constants in ``options``."""

    @staticmethod
    def forward(ctx, query, key, value, sinks, options):  # type: ignore[override]
        out, lse = _sdpa(query, key, value, sinks=sinks, layout="BHLD", return_lse=True, **options)
        ctx.save_for_backward(query, key, value, out, lse, sinks)
        ctx.attn_options = options
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):  # type: ignore[override]
        query, key, value, out, lse, sinks = ctx.saved_tensors
        if dout.stride(-1) != 1:  # autograd hands out expanded gradients (out.sum())
            dout = dout.contiguous()
        grads = _sdpa_backward(query, key, value, dout, out=out, lse=lse, layout="BHLD", sinks=sinks,
                               **ctx.attn_options)
        dsinks = None
        if sinks is not None and ctx.needs_input_grad[3]:
            dsinks = torch.from_numpy(grads[3]).to(sinks.dtype)
        return grads[0], grads[1], grads[2], dsinks, None


def _flatten_batch(t: torch.Tensor, name: str) -> torch.Tensor:
    """[N, ..., H, L, E] with more than one batch axis as [N*..., H, L, E]."""
    if t.dim() <= 4:
        return t
    return t.reshape(-1, *t.shape[-3:])


def _constant(x, name: str):
    """An option tensor attn takes no gradient for."""
    if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
        raise _core.UnsupportedError(f"{name} requires grad: attn gives no gradient for {name}; "
                                     f"pass {name}.detach()")
    return x


def _empty_result(query, key, value, shape_out):
    """L = 0 or S = 0: torch's answer (an empty output, or zeros: no key to
    mix), still in the graph so that backward gives zero gradients."""
    zero = (query.sum() + key.sum() + value.sum()) * 0
    return torch.zeros(shape_out, dtype=query.dtype) + zero


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
    *,
    window_size: Optional[Tuple[int, int]] = None,
    softcap: Optional[float] = None,
    alibi_slopes: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    key_lengths: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention on libattn.

    query [N, ..., Hq, L, E]  key [N, ..., Hkv, S, E]  value [N, ..., Hkv, S, Ev]
    attn_mask: bool (True = may attend) or float (added), broadcastable to
    [N, ..., Hq, L, S].  Returns [N, ..., Hq, L, Ev], query's dtype.
    Hq == Hkv unless enable_gqa (then Hq a multiple of Hkv).

    attn's extensions, keyword only (docs/semantics.md):
        window_size   (left, right) keys around the diagonal, -1 = unbounded
                      (at is_causal's top-left diagonal)
        softcap       > 0: scores capped to softcap * tanh(s / softcap)
        alibi_slopes  [Hq] per-head ALiBi slopes (constants)
        sinks         [Hq] per-head sink logits; gradient dsinks when it requires grad
        key_lengths   [N] integers: keys at or past key_lengths[n] are padding
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dropout_p != 0.0:
        raise _core.UnsupportedError(
            f"dropout_p={dropout_p}: attn has no dropout; pass dropout_p=0.0 (e.g. in eval mode)"
        )
    if is_causal and attn_mask is not None:
        raise _core.ArgumentError("attn_mask and is_causal cannot both be set (as in PyTorch): "
                                  "fold the causal rule into the mask")
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, "
                        f"{value.dtype}")
    if query.dim() < 2 or key.dim() != query.dim() or value.dim() != query.dim():
        raise _core.ShapeError(
            f"query, key and value have {query.dim()}, {key.dim()} and {value.dim()} dimensions: "
            f"expected the same rank, at least 2 ([..., L, E])"
        )
    if query.dim() >= 3:
        hq, hkv = query.shape[-3], key.shape[-3]
        if hq != hkv and not enable_gqa:
            raise _core.ShapeError(
                f"query has {hq} heads and key {hkv}: the same number is needed unless "
                f"enable_gqa=True"
            )
    if scale is not None and not (isinstance(scale, (int, float)) and scale > 0):
        raise _core.ArgumentError(f"scale={scale!r}: attn takes a positive scale (or None)")
    mask = bias = None
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise TypeError(f"attn_mask must be a torch.Tensor or None, got {type(attn_mask).__name__}")
        if attn_mask.dtype == torch.bool:
            mask = attn_mask
        elif attn_mask.is_floating_point():
            if attn_mask.requires_grad and torch.is_grad_enabled():
                raise _core.UnsupportedError(
                    "attn_mask requires grad: attn's backward gives no gradient for an additive "
                    "mask; pass attn_mask.detach()"
                )
            bias = attn_mask
        else:
            raise TypeError(f"attn_mask has dtype {attn_mask.dtype}: expected bool (True = may "
                            f"attend) or a float type (added to the scores)")
    shape = query.shape
    shape_out = (*shape[:-1], value.shape[-1])
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if query.shape[-2] == 0 or key.shape[-2] == 0:
        return _empty_result(query, key, value, shape_out)
    if query.dim() > 4:
        full = tuple(shape[:-3])
        query, key, value = (_flatten_batch(t, n) for t, n in ((query, "query"), (key, "key"), (value, "value")))
        m = mask if mask is not None else bias
        if m is not None:
            heads = m.shape[-3] if m.dim() >= 3 else 1
            m = m.expand(*full, heads, *m.shape[-2:]).reshape(-1, heads, *m.shape[-2:])
            mask, bias = (m, None) if mask is not None else (None, m)
        if key_lengths is not None:
            key_lengths = torch.as_tensor(key_lengths).reshape(-1)
    options = dict(mask=mask, bias=bias, causal=bool(is_causal), scale=scale)
    if window_size is not None:
        options["window"] = tuple(window_size)
    if softcap is not None:
        options["softcap"] = softcap
    if alibi_slopes is not None:
        options["alibi"] = _constant(alibi_slopes, "alibi_slopes")
    if key_lengths is not None:
        options["key_lengths"] = key_lengths
    if sinks is not None and not isinstance(sinks, torch.Tensor):
        sinks = torch.as_tensor(sinks, dtype=torch.float32)
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (query, key, value, sinks))
    if needs_grad:
        out = _Attention.apply(query, key, value, sinks, options)
    else:
        out = _sdpa(query, key, value, sinks=sinks, layout="BHLD", **options)
    if len(shape) > 4:
        out = out.reshape(shape_out)
    return out


# ------------------------------------------------------------- a whole model

class _ModelLogits(torch.autograd.Function):
    """attn.Model's forward with hook_embed replaced by embed, and
    attn_decoder_backward for its gradient: d logits -> d embed."""

    @staticmethod
    def forward(ctx, embed, model, ids):
        values = embed.detach().to(torch.float32).contiguous().numpy()
        replace = lambda name, buf, shape: values
        embed_point = 1 << _core.hook_parse("hook_embed")[0]
        L, V = ids.size, model.config["vocab"]
        logits = torch.empty((L, V), dtype=torch.float32)
        _core.model_forward(model._handle, ids, logits.numpy(), None, None, False, 0, replace, embed_point)
        ctx.model, ctx.ids, ctx.values, ctx.embed_point = model, ids, values, embed_point
        return logits

    @staticmethod
    def backward(ctx, grad_logits):
        model, ids, values = ctx.model, ctx.ids, ctx.values
        replace = lambda name, buf, shape: values
        L, V, d = ids.size, model.config["vocab"], model.config["d_model"]
        d_embed = torch.empty((L, d), dtype=torch.float32)
        own = torch.empty((L, V), dtype=torch.float32)
        _core.model_backward(model._handle, ids, grad_logits.detach().to(torch.float32).contiguous().numpy(),
                             own.numpy(), d_embed.numpy(), replace, ctx.embed_point, None, 0)
        return d_embed, None, None


def model_logits(model, ids, embed: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The logits [L, V] of an attn.Model over ids [L] as a torch function of
    the embeddings embed [L, d] (hook_embed: the model's own, times sqrt(d)
    on Gemma, when None): loss.backward() fills embed.grad through
    attn_decoder_backward (input x gradient, integrated gradients, ...).
    The weights are constants (no weight gradients)."""
    import numpy as np

    ids = np.ascontiguousarray(model._ids(ids) if not isinstance(ids, str) else model.tokenize(ids), dtype=np.int32)
    if embed is None:
        _, cache = model.run_with_cache(ids, names_filter="hook_embed", remove_batch_dim=True)
        embed = torch.from_numpy(np.array(cache["hook_embed"])).requires_grad_(True)
    if tuple(embed.shape) != (ids.size, model.config["d_model"]):
        raise ValueError(f"embed: shape {tuple(embed.shape)}, expected ({ids.size}, {model.config['d_model']})")
    return _ModelLogits.apply(embed, model, ids)
