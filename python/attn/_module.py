"""attn.mha_forward and attn.mha_backward: multi-head attention as a module
(attn_mha_forward / attn_mha_backward), the chapter's row convention:

    Q = X . wq + bq        wq [d_model,   Hq  * D ]
    K = C . wk + bk        wk [d_context, Hkv * D ]    C = X for self-attention
    V = C . wv + bv        wv [d_context, Hkv * Dv]
    Z = concat_h sdpa(Q_h, K_{h / (Hq/Hkv)}, V_...)    [B, L, Hq * Dv]
    out = Z . wo + bo      wo [Hq * Dv, d_out], or None: out = Z

x [B, L, d_model] (or [L, d_model]), context [B, S, d_context] or None.
Every array is float32 and C-contiguous (a weight matrix is read as one
block; nn.Linear's [out, in] weight is the transpose: pass weight.T.copy()).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _arrays, _core
from . import _options

_PARAMS = ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo")


def _f32(x: Any, name: str, ndim: tuple[int, ...]) -> Any:
    if x is None:
        return None
    a = _arrays.as_array(x, name)
    if a.dtype_name != "float32":
        raise TypeError(f"{name} has dtype {a.dtype_name}: the module computes float32")
    if a.view.ndim not in ndim:
        raise _core.ShapeError(f"{name} has {a.view.ndim} dimensions {tuple(a.view.shape)}: expected "
                               f"{' or '.join(str(n) for n in ndim)}")
    if not a.view.flags.c_contiguous:
        raise _core.ShapeError(f"{name} is not C-contiguous: the module reads it as one block; "
                               f"pass numpy.ascontiguousarray({name})")
    return a


def _sizes(x, context, wq, wk, wv, wo, heads, kv_heads):
    xa = _f32(x, "x", (2, 3))
    batch, length, d_model = (1,) + xa.view.shape if xa.view.ndim == 2 else xa.view.shape
    ca = _f32(context, "context", (xa.view.ndim,))
    if ca is not None:
        cb, context_len, d_context = (1,) + ca.view.shape if ca.view.ndim == 2 else ca.view.shape
    else:
        context_len, d_context = 0, 0
    heads = int(heads)
    kv_heads = heads if kv_heads is None else int(kv_heads)
    if heads < 1 or kv_heads < 1:
        raise ValueError(f"heads and kv_heads must be >= 1, got {heads} and {kv_heads}")
    ws = {n: _f32(w, n, (2,)) for n, w in (("wq", wq), ("wk", wk), ("wv", wv), ("wo", wo))}
    for n in ("wq", "wk", "wv"):
        if ws[n] is None:
            raise TypeError(f"{n} is None: the module needs wq, wk and wv")
    width = {"wq": heads, "wk": kv_heads, "wv": kv_heads}
    for n, h in width.items():
        if ws[n].view.shape[1] % h:
            raise _core.ShapeError(f"{n} has shape {tuple(ws[n].view.shape)}: its width is not a "
                                   f"multiple of its {h} heads")
    head_dim = ws["wq"].view.shape[1] // heads
    value_dim = ws["wv"].view.shape[1] // kv_heads
    d_out = ws["wo"].view.shape[1] if ws["wo"] is not None else heads * value_dim
    sizes = dict(batch=batch, len=length, context_len=context_len, d_model=d_model,
                 d_context=d_context if ca is not None else d_model, heads=heads, kv_heads=kv_heads,
                 head_dim=head_dim, value_dim=value_dim, d_out=d_out)
    return xa, ca, ws, sizes


def _buffers(xa, ca, ws, biases):
    bs = {n: _f32(b, n, (1,)) for n, b in biases.items()}
    out = dict(x=xa.view, context=None if ca is None else ca.view)
    for n in _PARAMS:
        a = ws.get(n) if n.startswith("w") else bs.get(n)
        out[n] = None if a is None else a.view
    return out


@_options.takes_options
def mha_forward(x: Any, wq: Any, wk: Any, wv: Any, *, heads: int, kv_heads: Any = None,
                wo: Any = None, bq: Any = None, bk: Any = None, bv: Any = None, bo: Any = None,
                context: Any = None, return_weights: bool = False, return_lse: bool = False,
                **options: Any):
    """Multi-head attention forward (attn_mha_forward).

    x [B, L, d_model] or [L, d_model]; wq [d_model, Hq*D], wk [d_context, Hkv*D],
    wv [d_context, Hkv*Dv], wo [Hq*Dv, d_out] or None; biases [width] or None;
    context [B, S, d_context] or None (self-attention).  heads = Hq, kv_heads
    = Hkv (default Hq).  Attention options as attn.sdpa.
    Returns out [B, L, d_out] (x's rank), or with weights [B, Hq, L, S] /
    lse [B, Hq, L] as attn.sdpa does.
    """
    xa, ca, ws, sizes = _sizes(x, context, wq, wk, wv, wo, heads, kv_heads)
    bufs = _buffers(xa, ca, ws, dict(bq=bq, bk=bk, bv=bv, bo=bo))
    opts = _options.core_options("mha_forward", sizes["batch"], options)
    b, l, hq = sizes["batch"], sizes["len"], sizes["heads"]
    s = sizes["context_len"] if ca is not None else l
    out_obj, out = _arrays.empty_f32((b, l, sizes["d_out"]), xa)
    weights, weights_view = _arrays.empty_f32((b, hq, l, s), xa) if return_weights else (None, None)
    lse, lse_view = _arrays.empty_f32((b, hq, l), xa) if return_lse else (None, None)
    _core.mha_forward(**sizes, **bufs, out=out, weights=weights_view, lse=lse_view, **opts)
    if xa.view.ndim == 2:
        out_obj = out_obj[0]
        weights = None if weights is None else weights[0]
        lse = None if lse is None else lse[0]
    if not (return_weights or return_lse):
        return out_obj
    return (out_obj,) + tuple(a for a, want in ((weights, return_weights), (lse, return_lse)) if want)


@_options.takes_options
def mha_backward(x: Any, dout: Any, wq: Any, wk: Any, wv: Any, *, heads: int, kv_heads: Any = None,
                 wo: Any = None, bq: Any = None, bk: Any = None, bv: Any = None, bo: Any = None,
                 context: Any = None, **options: Any) -> dict:
    """Gradients of attn.mha_forward (attn_mha_backward), recomputing the
    forward.  dout [B, L, d_out] (x's rank).  Returns a dict of float32
    arrays shaped like what they differentiate: dx, dwq, dwk, dwv, dbq, dbk,
    dbv, and dcontext (cross-attention), dwo and dbo (with wo).  A bias
    gradient is returned whether or not the bias was given (at its value, 0
    when absent)."""
    xa, ca, ws, sizes = _sizes(x, context, wq, wk, wv, wo, heads, kv_heads)
    bufs = _buffers(xa, ca, ws, dict(bq=bq, bk=bk, bv=bv, bo=bo))
    opts = _options.core_options("mha_backward", sizes["batch"], options)
    da = _f32(dout, "dout", (xa.view.ndim,))
    expected = xa.view.shape[:-1] + (sizes["d_out"],)
    if da.view.shape != expected:
        raise _core.ShapeError(f"dout has shape {tuple(da.view.shape)}: expected {expected} ([B, L, d_out])")
    grads = {"dx": xa.view.shape}
    if ca is not None:
        grads["dcontext"] = ca.view.shape
    for n in ("wq", "wk", "wv", "wo"):
        if ws[n] is not None:
            grads["d" + n] = ws[n].view.shape
            grads["db" + n[1]] = (ws[n].view.shape[1],)
    made = {n: _arrays.empty_f32(shape, xa) for n, shape in grads.items()}
    views = {n: made[n][1] if n in made else None
             for n in ("dx", "dcontext", "dwq", "dwk", "dwv", "dwo", "dbq", "dbk", "dbv", "dbo")}
    _core.mha_backward(**sizes, **bufs, dout=da.view, **views, **opts)
    return {n: obj for n, (obj, _view) in made.items()}
