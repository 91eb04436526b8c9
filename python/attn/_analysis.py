"""Attention analyses beyond the weights (include/attn_analysis.h):
value-weighted norms (Kobayashi et al., EMNLP 2020), attention rollout and
attention flow (Abnar & Zuidema, ACL 2020).  docs/interpretability.md says
what each can and cannot show.

Shapes (TransformerLens's, without a batch axis):
    pattern   [n_heads, L, S]          a layer's hook_pattern
    v         [S, n_kv_heads, d_head]  its hook_v (GQA: head h reads kv head h // (n_heads // n_kv_heads))
    W_O       [n_heads, d_head, d_model]  model.W_O[layer]
    patterns  [n_layers, n_heads, L, L]   cache.stack_activation("pattern")
"""

from typing import Any, Optional

import numpy as np

from . import _core

ALL_HEADS = -1


def _float32(x: Any, name: str, ndim: int) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    if a.ndim != ndim:
        raise _core.ShapeError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    return a


def value_weighted_norms(pattern: Any, v: Any, W_O: Any = None, *, reference: bool = False) -> np.ndarray:
    """||pattern[h, i, j] * v[j, h // group] @ W_O[h]||, [n_heads, L, S]
    float32 (W_O None: ||pattern[h, i, j] * v[j, h // group]||).
    reference: the library's reference twin (every cell's vector formed)."""
    p = _float32(pattern, "pattern", 3)
    vv = _float32(v, "v", 3)
    H, L, S = p.shape
    if vv.shape[0] != S:
        raise _core.ShapeError(f"v {vv.shape}: expected [S={S}, n_kv_heads, d_head] for pattern {p.shape}")
    Hkv, Dh = vv.shape[1], vv.shape[2]
    wo, d = None, 1
    if W_O is not None:
        wo = _float32(W_O, "W_O", 3)
        if wo.shape[:2] != (H, Dh):
            raise _core.ShapeError(f"W_O {wo.shape}: expected [n_heads={H}, d_head={Dh}, d_model]")
        d = wo.shape[2]
    norms = np.empty((H, L, S), dtype=np.float32)
    _core.value_norms(p, vv, wo, norms, heads=H, queries=L, keys=S, kv_heads=Hkv, head_dim=Dh, width=d,
                      reference=bool(reference))
    return norms


def _patterns(patterns: Any) -> np.ndarray:
    p = _float32(patterns, "patterns", 4)
    if p.shape[2] != p.shape[3]:
        raise _core.ShapeError(f"patterns {p.shape}: expected [n_layers, n_heads, L, L] (self-attention)")
    return p


def attention_rollout(patterns: Any, *, head: Optional[int] = None, residual: float = 0.5) -> np.ndarray:
    """Abnar & Zuidema's rollout, [n_layers, L, L] float64: row i of layer l
    is the share of each input token at position i after layer l, each
    layer's map (the heads' mean, or head ``head`` alone) taken as
    (1 - residual) A + residual I, rows renormalised, multiplied layer by layer."""
    p = _patterns(patterns)
    N, H, L, _ = p.shape
    out = np.empty((N, L, L), dtype=np.float64)
    _core.rollout(p, out, layers=N, heads=H, tokens=L, head=ALL_HEADS if head is None else int(head),
                  residual=float(residual))
    return out


def attention_flow(patterns: Any, position: int = -1, *, head: Optional[int] = None,
                   residual: float = 0.5) -> np.ndarray:
    """Abnar & Zuidema's flow, [L] float64: the max-flow from each input
    token to ``position`` after the last layer, in the layered graph whose
    edges carry attention_rollout's per-layer maps.  At most
    (n_layers + 1) * L = 4096 nodes (attn.ArgumentError beyond)."""
    p = _patterns(patterns)
    N, H, L, _ = p.shape
    out = np.empty(L, dtype=np.float64)
    _core.rollout(p, out, layers=N, heads=H, tokens=L, head=ALL_HEADS if head is None else int(head),
                  residual=float(residual), position=int(position))
    return out
