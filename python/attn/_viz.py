"""attn.heatmap: attention maps as PNG, SVG or PDF (attn_heatmap_write, libattn_viz);
attn.report: the self-contained HTML report (attn_report_write_html)."""

from __future__ import annotations

import base64
import html
import os
from typing import Any, Optional, Sequence, Union

import numpy as np

from . import _arrays, _core

#: The CLI's automatic colour scale (tools/cmd_map.c): from 0 to this
#: quantile of the visible weights, for maps larger than AUTO_FROM a side.
AUTO_QUANTILE = 0.99
AUTO_FROM = 64


class Picture(str):
    """The path a picture or report was written to (a str), which a
    notebook shows inline (_repr_html_): an SVG as itself, a PNG as a data
    URL, a report in a sandboxed iframe holding the page (no network)."""

    def _repr_html_(self) -> str:
        ext = os.path.splitext(self)[1].lower()
        if ext == ".svg":
            with open(self, encoding="utf-8") as f:
                text = f.read()
            return text[text.index("<svg"):] if "<svg" in text else text
        if ext == ".png":
            with open(self, "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
            return f'<img src="data:image/png;base64,{data}" alt="{html.escape(os.path.basename(self))}"/>'
        if ext in (".html", ".htm"):
            with open(self, encoding="utf-8") as f:
                page = f.read()
            return (f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
                    f'style="width:100%;height:720px;border:0"></iframe>')
        return f"<code>{html.escape(str(self))}</code> (a {ext or 'file'}: not shown inline)"


def _causal_visible(arr: np.ndarray) -> Optional[np.ndarray]:
    """The causal mask [.., L, S] when every weight above the diagonal
    (lower-right aligned) is exactly 0 in every map: then those cells were
    hidden, not weighed 0, and are drawn hatched.  None otherwise."""
    len_q, len_kv = arr.shape[-2:]
    if len_q < 2 or len_kv < len_q:
        return None
    i = np.arange(len_q)[:, None] + (len_kv - len_q)
    j = np.arange(len_kv)[None, :]
    causal = j <= i
    return causal if not np.any(arr[..., ~causal]) else None


def _visible(visible: Any, arr: np.ndarray) -> Optional[np.ndarray]:
    """visible as given (None: "auto"), "auto" (the causal mask when the maps
    are causal), or False (everything visible)."""
    if visible is None or (isinstance(visible, str) and visible == "auto"):
        return _causal_visible(arr)
    if visible is False:
        return None
    return np.asarray(_arrays._host_numpy(visible, "visible")) != 0


def pictures_available() -> bool:
    """True when this build draws pictures (libattn_viz built with cairo)."""
    return bool(_core.pictures)


def heatmap(
    path: "str | os.PathLike[str]",
    weights: Any,
    *,
    query_labels: Optional[Sequence[str]] = None,
    key_labels: Optional[Sequence[str]] = None,
    visible: Any = "auto",
    head_ids: Optional[Sequence[int]] = None,
    panel_titles: Optional[Sequence[str]] = None,
    title: Optional[str] = None,
    lang: str = "en",
    vmin: Optional[float] = None,
    vmax: Union[None, float, str] = None,
    values: Any = None,
    columns: int = 0,
    cell: float = 0.0,
) -> str:
    """Draws attention maps, one panel per head, to ``path`` (.png and .svg:
    heads in a grid; .pdf: a page per head), written atomically.

        weights  [H, L, S] or [L, S] float32 (one batch of attn.sdpa's weights,
                 or a trace's hook_pattern / hook_attn_scores)
        visible  bool, weights' shape, True = the query may read the key
                 (hidden cells are hatched grey, as are -inf cells);
                 "auto" (the default): the causal mask when every weight
                 above the diagonal is exactly 0; False: all visible
        query_labels [L], key_labels [S]: UTF-8 labels (CJK renders with
                 fonts-noto-cjk); head_ids [H] ("head 3") or panel_titles
                 [H] ("layer 2 · head 5") for the panel titles; a 2-D map
                 has no "head 0" title
        vmin, vmax   colour scale.  None (the default): the CLI's automatic
                 scale, 0 to the 99th percentile of the visible weights for
                 maps over 64 a side (a 512 x 512 map, a 1 x 512 decode row),
                 [0, 1] below; vmax="auto": always that quantile; numbers: fixed
        values   print each cell's value: None = for maps up to 16 x 16,
                 True = always, False = never
    Raises attn.UnsupportedError when the build has no cairo
    (attn.pictures_available()).  Returns the path (an attn.Picture: a str
    that a notebook shows inline).
    """
    w = _arrays.as_array(weights, "weights")
    if w.dtype_name != "float32":
        raise TypeError(f"weights has dtype {w.dtype_name}: expected float32")
    if w.view.ndim not in (2, 3):
        raise _core.ShapeError(f"weights has shape {tuple(w.view.shape)}: expected [H, L, S] or [L, S]")
    arr = w.view if w.view.ndim == 3 else w.view[None]
    heads, len_q, len_kv = arr.shape
    vis = _visible(visible, arr)
    if vis is not None:
        vis = np.ascontiguousarray(np.broadcast_to(vis.reshape((1,) * (3 - vis.ndim) + vis.shape), arr.shape)).view(np.uint8)
    ids = None if head_ids is None else np.ascontiguousarray(np.asarray(head_ids), dtype=np.int64)
    titles = _label_list(panel_titles, "panel_titles")
    if titles is None and ids is None and w.view.ndim == 2:
        titles = [""]  # one map: no "head 0"
    quantile = 0.0
    if isinstance(vmax, str):
        if vmax != "auto":
            raise ValueError(f"vmax must be a number, 'auto' or None, got {vmax!r}")
        if vmin is not None:
            raise ValueError("vmax='auto' starts the scale at 0: drop vmin, or give vmax a number")
        quantile = AUTO_QUANTILE
    elif vmin is None and vmax is None and (len_q > AUTO_FROM or len_kv > AUTO_FROM):
        quantile = AUTO_QUANTILE
    low = 0.0 if vmin is None else float(vmin)
    high = (1.0 if vmin is not None else 0.0) if vmax is None or isinstance(vmax, str) else float(vmax)
    if vmin is not None and vmax is None and not high > low:
        raise ValueError(f"vmin={vmin} needs vmax (the default 1 is not above it)")
    flag = 0 if values is None else (1 if values else -1)
    path = os.fspath(path)
    _core.heatmap(path, np.ascontiguousarray(arr), heads, len_q, len_kv, query_labels=query_labels,
                  key_labels=key_labels, visible=vis, head_ids=ids, title=title, lang=lang,
                  vmin=low, vmax=high, values=flag, columns=int(columns), cell=float(cell),
                  panel_titles=titles, vmax_quantile=quantile)
    return Picture(path)


def _label_list(labels: Optional[Sequence[str]], name: str) -> Optional[list]:
    if labels is None:
        return None
    if isinstance(labels, (str, bytes)):
        raise TypeError(f"{name}: a sequence of str is needed, not one string")
    return [str(x) for x in labels]


def report(
    path: "str | os.PathLike[str]",
    weights: Any,
    *,
    visible: Any = "auto",
    query_labels: Optional[Sequence[str]] = None,
    key_labels: Optional[Sequence[str]] = None,
    head_ids: Optional[Sequence[int]] = None,
    layer_ids: Optional[Sequence[int]] = None,
    title: Optional[str] = None,
    subtitle: Optional[str] = None,
    paths: Optional[dict] = None,
    paths_batch: int = 0,
    line: Any = None,
    line_labels: Optional[Sequence[str]] = None,
    line_title: Optional[str] = None,
) -> str:
    """Writes ONE self-contained HTML report of attention maps to ``path``
    (attn_report_write_html; no network access, no external scripts), written
    atomically: a heat map per head (hover a cell: the token pair and the exact
    float32 weight), a bertviz-style token view, a layer selector for a
    model's maps, and the path table of the chapter's Figure 2 when
    ``paths`` is given.

        weights  [L, S], [H, L, S] or [layers, H, L, S] float32: attn.sdpa's
                 weights of one batch, a trace's hook_pattern [0], or
                 np.stack of a model's run_with_cache patterns (one per layer)
        visible  bool, broadcastable to weights, True = the query may read the
                 key (hidden cells are hatched grey and need not be stored);
                 "auto" (the default): the causal mask when every weight above
                 the diagonal is exactly 0, so that hidden cells are not
                 drawn as weight 0; False: all visible
        query_labels [L], key_labels [S] (default: query_labels when S = L)
        head_ids [H], layer_ids [layers]: the numbers the page shows
        paths    the dict attn.paths returns (bare attention, same L and S);
                 weights must then be one layer; head_ids (default 0 .. H-1)
                 index its query heads
        line     [n] finite floats drawn as a line plot under the maps (e.g.
                 the cosine of two tokens' vectors layer by layer), with
                 line_labels [n] and line_title
    Open ``path#selftest&cells=H:I:J`` in a browser to have the page check
    itself (docs/pictures.md).  Returns the path (an attn.Picture: a str
    that a notebook shows inline, the page in an iframe).
    """
    w = _arrays.as_array(weights, "weights")
    if w.dtype_name != "float32":
        raise TypeError(f"weights has dtype {w.dtype_name}: expected float32")
    if w.view.ndim not in (2, 3, 4):
        raise _core.ShapeError(
            f"weights has shape {tuple(w.view.shape)}: expected [L, S], [H, L, S] or [layers, H, L, S]")
    arr = w.view.reshape((1,) * (4 - w.view.ndim) + tuple(w.view.shape))
    layers, heads, len_q, len_kv = arr.shape
    vis = None
    v = _visible(visible, arr)
    if v is not None:
        try:
            v = np.broadcast_to(v.reshape((1,) * (4 - v.ndim) + v.shape), arr.shape)
        except ValueError:
            raise _core.ShapeError(
                f"visible has shape {tuple(v.shape)}, which does not broadcast to weights' {tuple(w.view.shape)}"
            ) from None
        vis = np.ascontiguousarray(v).view(np.uint8)
    ids = None if head_ids is None else np.ascontiguousarray(np.asarray(head_ids), dtype=np.int64)
    lids = None if layer_ids is None else np.ascontiguousarray(np.asarray(layer_ids), dtype=np.int64)
    lin = None if line is None else np.ascontiguousarray(np.asarray(line, dtype=np.float64).reshape(-1))
    spec = None
    if paths is not None:
        if not isinstance(paths, dict) or "interaction_z" not in paths:
            raise TypeError("paths: the dict attn.paths returns is needed")
        if layers != 1:
            raise _core.ShapeError(f"paths need one layer of weights, got {layers}")
        cases = ("base", "K only", "V only", "both", "changed")
        missing = [c for c in cases if c not in paths]
        if missing:
            raise TypeError(f"paths: no {missing[0]!r} run (the dict attn.paths returns is needed)")
        z = tuple(np.ascontiguousarray(paths[c]["hook_z"], dtype=np.float32) for c in cases)
        pattern = tuple(np.ascontiguousarray(paths[c]["hook_pattern"], dtype=np.float32) for c in cases)
        inter = np.ascontiguousarray(paths["interaction_z"], dtype=np.float32)
        batch, _, heads_all, value_dim = z[0].shape
        if pattern[0].shape[2:] != (len_q, len_kv):
            raise _core.ShapeError(
                f"paths are for {pattern[0].shape[2]} queries x {pattern[0].shape[3]} keys, "
                f"the weights for {len_q} x {len_kv}")
        spec = (batch, heads_all, value_dim, z, pattern, inter)
    path = os.fspath(path)
    _core.report(path, np.ascontiguousarray(arr), layers, heads, len_q, len_kv, visible=vis, head_ids=ids,
                 layer_ids=lids, query_labels=_label_list(query_labels, "query_labels"),
                 key_labels=_label_list(key_labels, "key_labels"), title=title, subtitle=subtitle, line=lin,
                 line_labels=_label_list(line_labels, "line_labels"), line_title=line_title, paths=spec,
                 paths_batch=int(paths_batch))
    return Picture(path)
