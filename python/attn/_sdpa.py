"""attn.sdpa and attn.sdpa_backward: libattn's attention calls on arrays.

Shape legend (include/attn.h), in attn's layout "BLHD":
    q [B, L, Hq, D]   k [B, S, Hkv, D]   v [B, S, Hkv, Dv]   out [B, L, Hq, Dv]
    weights [B, Hq, L, S]  (heads before positions, in both layouts)
    lse     [B, Hq, L]
In torch's layout "BHLD" the tensors are [B, H, L, D] instead; the 2-D
[L, D] and 3-D ([L, H, D], or [H, L, D] in "BHLD") shorthands drop B (and H).
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np

from . import _arrays, _core, _options

#: attn_kernel's codes by name, for attn.Model's kernel= (the table's names, in the enum's order).
_KERNELS = {name: code for code, name in enumerate(_options.choices("kernel"))}


class LayoutWarning(UserWarning):
    """q and k read in attn's layout [B, L, H, D] look like torch's [B, H, L, D]."""


def _refuse_grad(fn: str, *tensors: Any) -> None:
    """attn.sdpa reads a tensor's memory: a result computed that way has no
    autograd history, so a gradient through it would silently be missing."""
    torch = _arrays.sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise _core.UnsupportedError(
                f"attn.{fn}: a tensor requires grad, and attn.{fn} returns a tensor with no "
                f"autograd history (the gradient would be lost without a word); use "
                f"attn.torch.scaled_dot_product_attention (torch's layout and signature, "
                f"gradients through attn's backward), or pass .detach() / run under "
                f"torch.no_grad() when no gradient is wanted"
            )


def _warn_if_transposed(fn: str, q4, k4) -> None:
    """The CLI's rule (tools/cli/cli_attention.c, cli_warn_if_transposed):
    read as [B, L, H, D], more heads than positions in both q and k (and more
    than one query), or more than 256 heads, looks like torch's [B, H, L, D]."""
    both_wide = q4.shape[2] > q4.shape[1] and k4.shape[2] > k4.shape[1] and q4.shape[1] > 1
    for name, t in (("q", q4), ("k", k4)):
        positions, heads = t.shape[1], t.shape[2]
        if heads > 256 or (both_wide and name == "q"):
            warnings.warn(
                f"attn.{fn}: {name} read as [B, L, H, D] (layout 'BLHD', the default) has "
                f"{positions} position{'' if positions == 1 else 's'} and {heads} heads; if it is "
                f"torch's [B, H, L, D], pass layout='BHLD' (layout='BLHD' silences this)",
                LayoutWarning,
                stacklevel=4,
            )
            return


def _inputs(q: Any, k: Any, v: Any, layout: Optional[str], fn: str = "sdpa"):
    given = layout is not None
    layout = _arrays.check_layout(layout if given else "BLHD")
    _refuse_grad(fn, q, k, v)
    qa, ka, va = _arrays.as_array(q, "q"), _arrays.as_array(k, "k"), _arrays.as_array(v, "v")
    q4 = _arrays.to_blhd(qa.view, "q", layout)
    k4 = _arrays.to_blhd(ka.view, "k", layout)
    v4 = _arrays.to_blhd(va.view, "v", layout)
    if not (qa.view.ndim == ka.view.ndim == va.view.ndim):
        raise _core.ShapeError(
            f"q, k and v have {qa.view.ndim}, {ka.view.ndim} and {va.view.ndim} dimensions: "
            f"give all three the same rank"
        )
    if not given and qa.view.ndim >= 3:
        _warn_if_transposed(fn, q4, k4)
    return qa, ka, va, q4, k4, v4


def _new_like(shape4: tuple[int, int, int, int], like: Any, layout: str, ndim: int):
    """A new output: (what the caller gets, its 4-D [B, L, H, W] view)."""
    b, l, h, w = shape4
    alloc = (b, l, h, w) if layout == "BLHD" else (b, h, l, w)
    obj, view = _arrays.empty(alloc, like)
    view4 = view if layout == "BLHD" else view.transpose(0, 2, 1, 3)
    return _arrays.squeeze_to(obj, ndim, layout), view4


def _given_out(x: Any, name: str, shape4: tuple[int, ...], layout: str, ndim: int):
    a = _arrays.as_array(x, name)
    view4 = _check_shape(a, name, shape4, layout, ndim)
    if not a.view.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return a, view4


@_options.takes_options
def sdpa(
    q: Any,
    k: Any,
    v: Any,
    *,
    layout: Optional[str] = None,
    return_weights: bool = False,
    return_lse: bool = False,
    out: Any = None,
    **options: Any,
):
    """Scaled dot-product attention (attn_sdpa_forward).

    Layout "BLHD" (the default, attn's):
        q [B, L, Hq, D]   k [B, S, Hkv, D]   v [B, S, Hkv, Dv] -> out [B, L, Hq, Dv]
    Layout "BHLD" (torch's):
        q [B, Hq, L, D]   k [B, Hkv, S, D]   v [B, Hkv, S, Dv] -> out [B, Hq, L, Dv]
    Shorthands: [L, D] (one batch, one head); [L, H, D] ("BLHD") or
    [H, L, D] ("BHLD") for one batch.  Hq must be a multiple of Hkv (GQA).

    Options (docs/semantics.md; the same for every attention call, from
    libattn's table of them, attn_sdpa_option):
        causal       False, True or "top-left" (key j visible iff j <= i, torch's
                     is_causal), "lower-right" (j <= i + S - L, FlashAttention's)
        align        None (as causal says, else "top-left"), "top-left" or
                     "lower-right": the diagonal of causal=True, the window and ALiBi
        window       (left, right) around the causal diagonal, -1/None = unbounded
        key_lengths  [B] integers: keys at or past key_lengths[b] are padding
        query_start, key_start
                     where row 0 of q and of k sit in a longer sequence (a chunk
                     of a prefill, a slice of a cache): causal, window, ALiBi and
                     key_lengths act at those positions; default 0
        total_len_q, total_len_kv
                     that sequence's lengths, which place the lower-right
                     diagonal; 0 (the default) = this call's L and S
        mask         bool [L, S] .. [B, Hq, L, S], size-1 axes broadcast;
                     True (nonzero) = MAY attend, as in torch's SDPA
        bias         float [L, S] .. [B, Hq, L, S], added to the scaled scores;
                     -inf hides a key
        scale        > 0, default 1/sqrt(D)
        softcap      > 0: scores capped to softcap * tanh(s / softcap) (Gemma 2), before
                     bias, ALiBi and masks (docs/logits.md)
        sinks        [Hq] floats: a per-head logit that joins each row's softmax
                     denominator and adds no value (gpt-oss, StreamingLLM); -inf = none
        alibi        True (the ALiBi paper's slopes for Hq heads) or [Hq] slopes: a
                     per-head linear bias slope * (j - i) on the causal diagonal
        kernel       "auto", "ref" (the reference) or "flash"
        threads      None (the default count) or >= 1
        precision    "exact" (the default: float16/bfloat16 widened to float32) or
                     "fast" (native bfloat16 dot products on prefill where the CPU
                     has them; docs/kernels.md)
        out          an array to write the output into (q's layout and rank);
                     sharing memory with q, k, v or an option's array is
                     refused (attn.ArgumentError)

    Returns out, or the tuple (out, weights), (out, lse) or (out, weights, lse)
    when asked for; weights [B, Hq, L, S] and lse [B, Hq, L] (natural log)
    are float32 in either layout.  A row that sees no key gives output 0,
    weights 0 and lse -inf (never NaN).  numpy in, numpy out; torch in,
    torch out.  q, k and v are read where they are (no copy); the GIL is
    released during the kernel.
    """
    qa, ka, va, q4, k4, v4 = _inputs(q, k, v, layout, "sdpa")
    layout = layout or "BLHD"
    opts = _options.core_options("sdpa", q4.shape[0], options)
    ndim = qa.view.ndim
    shape_out = (q4.shape[0], q4.shape[1], q4.shape[2], v4.shape[3])
    if out is None:
        result, out4 = _new_like(shape_out, qa, layout, ndim)
        out_code = qa.code
    else:
        oa, out4 = _given_out(out, "out", shape_out, layout, ndim)
        result, out_code = out, oa.code
    batch, heads, rows, keys = q4.shape[0], q4.shape[2], q4.shape[1], k4.shape[1]
    weights = lse = None
    if return_weights:
        weights, weights_view = _arrays.empty_f32((batch, heads, rows, keys), qa)
    if return_lse:
        lse, lse_view = _arrays.empty_f32((batch, heads, rows), qa)
    _core.sdpa_forward(
        (q4, qa.code),
        (k4, ka.code),
        (v4, va.code),
        (out4, out_code),
        weights_view if return_weights else None,
        lse_view if return_lse else None,
        **opts,
    )
    if not (return_weights or return_lse):
        return result
    extra = []
    if return_weights:
        extra.append(_arrays.squeeze_rows(weights, ndim))
    if return_lse:
        extra.append(_arrays.squeeze_rows(lse, ndim))
    return (result, *extra)


@_options.takes_options
def sdpa_backward(
    q: Any,
    k: Any,
    v: Any,
    dout: Any,
    *,
    out: Any = None,
    lse: Any = None,
    layout: Optional[str] = None,
    **options: Any,
):
    """Gradient of attn.sdpa with respect to q, k and v (attn_sdpa_backward).

        q, k, v   the forward's inputs, in ``layout`` (see attn.sdpa)
        dout      dLoss/dout, out's shape: [B, L, Hq, Dv] ("BLHD") or
                  [B, Hq, L, Dv] ("BHLD")
        out, lse  the forward's output and lse for these inputs (both, or
                  neither: then they are recomputed); lse [B, Hq, L]
        the forward's options (attn.sdpa's: causal, window, mask, ...)

    Returns (dq, dk, dv), shaped like q, k and v, and with sinks given also
    dsinks [Hq] float32: (dq, dk, dv, dsinks).  With GQA, dk and dv sum
    over the Hq/Hkv query heads sharing a kv head.  The mask and bias are
    constants: no gradient of the bias.  A row that sees no key gives dq 0.
    """
    qa, ka, va, q4, k4, v4 = _inputs(q, k, v, layout, "sdpa_backward")
    layout = layout or "BLHD"
    _refuse_grad("sdpa_backward", dout)
    opts = _options.core_options("sdpa_backward", q4.shape[0], options)
    ndim = qa.view.ndim
    shape_out = (q4.shape[0], q4.shape[1], q4.shape[2], v4.shape[3])
    da, dout4 = _given_out_input(dout, "dout", shape_out, layout, ndim)
    if (out is None) != (lse is None):
        raise _core.ArgumentError("out and lse: give both (the forward's) or neither")
    out_arg = lse_arg = None
    if out is not None:
        oa = _arrays.as_array(out, "out")
        out4 = _check_shape(oa, "out", shape_out, layout, ndim)
        out_arg = (out4, oa.code)
        la = _arrays.as_array(lse, "lse")
        lse_arg = la.view
        expected = (q4.shape[0], q4.shape[2], q4.shape[1])
        if la.code != _core.F32 or tuple(_as_rows4(la.view, ndim)) != expected:
            raise _core.ShapeError(
                f"lse has shape {tuple(la.view.shape)} and dtype {la.dtype_name}: expected float32 "
                f"[B, Hq, L] = {list(expected)} (the forward's lse)"
            )
        lse_arg = la.view.reshape(-1) if la.view.flags.c_contiguous else None
        if lse_arg is None:
            raise _core.ShapeError("lse must be C-contiguous (the forward's lse is)")
    dsinks = None if opts.get("sinks") is None else np.zeros(q4.shape[2], dtype=np.float32)
    dq, dq4 = _new_like(tuple(q4.shape), qa, layout, ndim)
    dk, dk4 = _new_like(tuple(k4.shape), ka, layout, ndim)
    dv, dv4 = _new_like(tuple(v4.shape), va, layout, ndim)
    _core.sdpa_backward(
        (q4, qa.code),
        (k4, ka.code),
        (v4, va.code),
        out_arg,
        lse_arg,
        (dout4, da.code),
        (dq4, qa.code),
        (dk4, ka.code),
        (dv4, va.code),
        dsinks=dsinks,
        **opts,
    )
    return (dq, dk, dv) if dsinks is None else (dq, dk, dv, dsinks)


def _as_rows4(a, ndim: int):
    return a.shape if ndim == 4 else ((1,) + a.shape if ndim == 3 else (1, 1) + a.shape)


def _check_shape(a, name: str, shape4, layout: str, ndim: int):
    if a.view.ndim != ndim:
        raise _core.ShapeError(f"{name} has {a.view.ndim} dimensions, q has {ndim}: give {name} q's rank")
    view4 = _arrays.to_blhd(a.view, name, layout)
    if tuple(view4.shape) != tuple(shape4):
        raise _core.ShapeError(
            f"{name} has shape {tuple(a.view.shape)}, which is {tuple(view4.shape)} as [B, L, H, W]; "
            f"expected {tuple(shape4)} as [B, L, H, W] (layout {layout})"
        )
    return view4


def _given_out_input(x: Any, name: str, shape4, layout: str, ndim: int):
    a = _arrays.as_array(x, name)
    return a, _check_shape(a, name, shape4, layout, ndim)


@_options.takes_options
def trace(q: Any, k: Any, v: Any, *, layout: Optional[str] = None, **options: Any) -> dict:
    """Every intermediate of one attention call (attn_sdpa_forward_traced),
    under TransformerLens's hook names and in its axis order, whatever the
    layout of the inputs:

        hook_q            [B, L, Hq, D]     batch pos head_index d_head
        hook_k            [B, S, Hkv, D]    (kv heads: GQA is not repeated)
        hook_v            [B, S, Hkv, Dv]
        hook_attn_scores  [B, Hq, L, S]     scale * q.k + bias; -inf where hidden
        hook_pattern      [B, Hq, L, S]     the weights (rows sum to 1, or 0)
        hook_z            [B, L, Hq, Dv]    each head's output

    Returns a dict of new float32 numpy arrays (the library's buffers, copied
    once).  The options are attn.sdpa's.  The 2-D and 3-D shorthands are
    given their batch (and head) axes here, as TransformerLens would.
    """
    qa, ka, va, q4, k4, v4 = _inputs(q, k, v, layout, "trace")
    opts = _options.core_options("trace", q4.shape[0], options)
    return _hooks(_core.sdpa_trace((q4, qa.code), (k4, ka.code), (v4, va.code), **opts))


def _array(entry):
    import numpy as np

    data, shape = entry
    return np.frombuffer(data, dtype=np.float32).reshape(shape)


def _hooks(entries: dict) -> dict:
    return {name: _array(entry) for name, entry in entries.items()}


@_options.takes_options
def paths(
    q: Any,
    k: Any,
    v: Any,
    *,
    q_changed: Any = None,
    k_changed: Any = None,
    v_changed: Any = None,
    layout: Optional[str] = None,
    **options: Any,
) -> dict:
    """The path decomposition of the chapter's Figure 2 (attn_sdpa_paths):
    with the base queries held fixed, the runs

        "base"     base keys, base values        "K only"  changed keys, base values
        "V only"   base keys, changed values     "both"    changed keys and values
        "changed"  the changed input's own run (its queries change too)

    each a dict of hooks as attn.trace returns, and "interaction_z"
    [B, L, Hq, Dv] = both - K only - V only + base (0 when the paths add up).
    The changed tensors (None = the base one) have the base's shapes and layout.
    """
    qa, ka, va, q4, k4, v4 = _inputs(q, k, v, layout, "paths")
    layout = layout or "BLHD"
    changed = []
    for name, x, like in (("q_changed", q_changed, q4), ("k_changed", k_changed, k4), ("v_changed", v_changed, v4)):
        if x is None:
            changed.append(None)
            continue
        a = _arrays.as_array(x, name)
        x4 = _arrays.to_blhd(a.view, name, layout)
        if x4.shape != like.shape:
            raise _core.ShapeError(f"{name} has shape {tuple(a.view.shape)}: the base's is needed")
        changed.append((x4, a.code))
    opts = _options.core_options("paths", q4.shape[0], options)
    runs = _core.sdpa_paths((q4, qa.code), (k4, ka.code), (v4, va.code), *changed, **opts)
    result = {name: _hooks(hooks) for name, hooks in runs.items() if name != "interaction_z"}
    result["interaction_z"] = _array(runs["interaction_z"])
    return result


def nullspace(
    weights: Any,
    values: Any,
    *,
    tolerance: float,
    visible: Any = None,
    exact_limit: int = 0,
    starts: int = 0,
    allow_slow: bool = False,
):
    """"Weights are not an explanation" (attn_nullspace_search): for one
    weight row and the value rows it mixes, the row w' farthest from it in
    L1 that gives the same output within ``tolerance``.

        weights  [S] non-negative (a row of hook_pattern), float32
        values   [S, width] (the v rows this query reads), float32
        visible  [S] bool, True = the key may carry weight, or None (all)

    Returns (moved [S] float64, info) with info's keys l1, max_output_change,
    exact (every sign pattern solved: the maximum), visible, programs.
    Beyond the work budget an explicit exact_limit raises attn.BudgetError.
    """
    import numpy as np

    w = _arrays.as_array(weights, "weights")
    val = _arrays.as_array(values, "values")
    if w.dtype_name != "float32" or val.dtype_name != "float32":
        raise TypeError("weights and values must be float32")
    if w.view.ndim != 1 or val.view.ndim != 2 or val.view.shape[0] != w.view.shape[0]:
        raise _core.ShapeError(f"weights {tuple(w.view.shape)} and values {tuple(val.view.shape)}: "
                               f"expected [S] and [S, width]")
    vis = None if visible is None else np.ascontiguousarray(_arrays._host_numpy(visible, "visible") != 0).view(np.uint8)
    moved = np.empty(w.view.shape[0], dtype=np.float64)
    info = _core.nullspace(np.ascontiguousarray(w.view), np.ascontiguousarray(val.view), vis, moved,
                           tolerance=float(tolerance), exact_limit=int(exact_limit), starts=int(starts),
                           allow_slow=bool(allow_slow))
    return moved, info
