"""attn.heatmap: attention maps as PNG, SVG or PDF (attn_heatmap_write, libattn_viz)."""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import numpy as np

from . import _arrays, _core


def pictures_available() -> bool:
    """True when this build draws pictures (libattn_viz built with cairo)."""
    return bool(_core.pictures)


def heatmap(
    path: "str | os.PathLike[str]",
    weights: Any,
    *,
    query_labels: Optional[Sequence[str]] = None,
    key_labels: Optional[Sequence[str]] = None,
    visible: Any = None,
    head_ids: Optional[Sequence[int]] = None,
    title: Optional[str] = None,
    lang: str = "en",
    vmin: float = 0.0,
    vmax: float = 0.0,
    values: Any = None,
    columns: int = 0,
    cell: float = 0.0,
) -> str:
    """Draws attention maps, one panel per head, to ``path`` (.png and .svg:
    heads in a grid; .pdf: a page per head), written atomically.

        weights  [H, L, S] or [L, S] float32 (one batch of attn.sdpa's weights,
                 or a trace's hook_pattern / hook_attn_scores)
        visible  bool, weights' shape, True = the query may read the key
                 (hidden cells are hatched grey, as are -inf cells)
        query_labels [L], key_labels [S]: UTF-8 labels (CJK renders with
                 fonts-noto-cjk); head_ids [H] for the panel titles
        vmin, vmax   colour scale; equal: [0, 1] when the data fit, else their range
        values   print each cell's value: None = for maps up to 16 x 16,
                 True = always, False = never
    Raises attn.UnsupportedError when the build has no cairo
    (attn.pictures_available()).  Returns the path.
    """
    w = _arrays.as_array(weights, "weights")
    if w.dtype_name != "float32":
        raise TypeError(f"weights has dtype {w.dtype_name}: expected float32")
    if w.view.ndim not in (2, 3):
        raise _core.ShapeError(f"weights has shape {tuple(w.view.shape)}: expected [H, L, S] or [L, S]")
    arr = w.view if w.view.ndim == 3 else w.view[None]
    heads, len_q, len_kv = arr.shape
    vis = None
    if visible is not None:
        vis = np.asarray(_arrays._host_numpy(visible, "visible")) != 0
        vis = np.ascontiguousarray(np.broadcast_to(vis.reshape((1,) * (3 - vis.ndim) + vis.shape), arr.shape)).view(np.uint8)
    ids = None if head_ids is None else np.ascontiguousarray(np.asarray(head_ids), dtype=np.int64)
    flag = 0 if values is None else (1 if values else -1)
    path = os.fspath(path)
    _core.heatmap(path, np.ascontiguousarray(arr), heads, len_q, len_kv, query_labels=query_labels,
                  key_labels=key_labels, visible=vis, head_ids=ids, title=title, lang=lang,
                  vmin=float(vmin), vmax=float(vmax), values=flag, columns=int(columns), cell=float(cell))
    return path
