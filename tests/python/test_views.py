"""bertviz's habits (issue 36 item 3): pictures and reports shown inline in
a notebook (_repr_html_, checked without a notebook: the page rendered in
headless Chromium runs its own self-test), the CLI's automatic colour
scale by default, a single map without a "head 0" title, and masked cells
drawn as masked when the report is not told the mask."""

import html
import re

import numpy as np
import pytest

import attn
from conftest import rand
from test_report import layer_weights, page_data, run_selftest, selftest


def _causal(rng, L=5, heads=2):
    q = rand(rng, 1, L, heads, 8)
    _, w = attn.sdpa(q, q, q, causal=True, return_weights=True)
    return w[0]


def test_report_without_visible_knows_a_causal_mask(tmp_path, rng):
    w = _causal(rng)
    path = tmp_path / "auto.html"
    attn.report(path, w)
    data = page_data(path)
    assert data["packed"] is True  # the hidden upper triangle is not stored: drawn hatched, not as 0
    visible = np.tril(np.ones((5, 5), dtype=bool))
    assert np.array_equal(layer_weights(data, 0), np.concatenate([w[h][visible] for h in range(2)]))
    attn.report(path, w, visible=False)  # said so: every cell a weight
    assert page_data(path)["packed"] is False
    full = np.full((2, 5, 5), 0.2, dtype=np.float32)  # not causal: nothing is hidden
    attn.report(path, full)
    assert page_data(path)["packed"] is False


def test_report_repr_html_renders_in_chromium(tmp_path, rng):
    w = _causal(rng, L=4)
    shown = attn.report(tmp_path / "r.html", w, query_labels=list("abcd"))
    assert isinstance(shown, attn.Picture) and shown == str(tmp_path / "r.html")
    fragment = shown._repr_html_()
    m = re.fullmatch(r'<iframe srcdoc="(.*)" sandbox="allow-scripts" style="[^"]*"></iframe>', fragment, re.S)
    assert m, fragment[:200]
    page = html.unescape(m.group(1))
    assert page == (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page  # self-contained: nothing fetched
    inline = tmp_path / "inline.html"
    inline.write_text(page, encoding="utf-8")  # what the iframe holds, run on its own
    cells = [(0, 1, 3, 2), (0, 0, 1, 0)]
    got = selftest(inline, cells, tmp_path)
    for a, h, i, j in cells:
        assert got[(a, h, i, j)] == w[h, i, j]


needs_cairo = pytest.mark.skipif(not attn.pictures_available(), reason="this build draws no pictures (no cairo)")


def _svg(tmp_path, name, weights, **kw):
    """The picture's SVG, cairo's per-process surface numbers left out."""
    attn.heatmap(tmp_path / name, weights, **kw)
    return re.sub(r"surface\d+", "surface", (tmp_path / name).read_text())


@needs_cairo
def test_heatmap_inline_and_titles(tmp_path, rng):
    """cairo draws text as glyphs: titles are compared picture to picture."""
    w = _causal(rng, L=6, heads=3)
    one = attn.heatmap(tmp_path / "one.svg", w[1])
    assert isinstance(one, attn.Picture) and one._repr_html_().startswith("<svg")
    # a 2-D map is drawn untitled, not as the 3-D map of one head ("head 0")
    assert _svg(tmp_path, "a.svg", w[1]) == _svg(tmp_path, "b.svg", w[1], panel_titles=[""])
    assert _svg(tmp_path, "a.svg", w[1]) != _svg(tmp_path, "c.svg", w[1:2])
    assert _svg(tmp_path, "c.svg", w[1:2]) == _svg(tmp_path, "d.svg", w[1:2], panel_titles=["head 0"])
    assert _svg(tmp_path, "e.svg", w[:2], panel_titles=["layer 3 · head 5", "layer 3 · head 6"]) != \
        _svg(tmp_path, "f.svg", w[:2])
    png = attn.heatmap(tmp_path / "one.png", w[0])
    assert png._repr_html_().startswith('<img src="data:image/png;base64,')


@needs_cairo
def test_heatmap_colour_scale_is_automatic_on_large_maps(tmp_path, rng):
    row = rng.random((1, 512)).astype(np.float32)
    row /= row.sum()  # a decode step over 512 keys: every weight about 1/512
    auto = _svg(tmp_path, "row.svg", row)
    assert auto == _svg(tmp_path, "q.svg", row, vmax="auto")  # the CLI's 99th percentile
    assert auto != _svg(tmp_path, "fixed.svg", row, vmin=0.0, vmax=1.0)
    small = _causal(rng)[0]  # up to 64 a side: [0, 1] as before
    assert _svg(tmp_path, "s.svg", small) != _svg(tmp_path, "sq.svg", small, vmax="auto")
    with pytest.raises(ValueError, match="drop vmin"):
        attn.heatmap(tmp_path / "x.svg", row, vmin=0.1, vmax="auto")


def test_report_overlays_every_head_in_its_colour(tmp_path, rng):
    """The token view's "all heads overlaid" (bertviz's head view): the
    page's self-test ticks it and counts the hues drawn, one per head."""
    w = _causal(rng, L=6, heads=4)
    path = attn.report(tmp_path / "overlay.html", w)
    text = run_selftest(path, "&overlay=1", tmp_path)
    bins = int(re.search(r"overlay hue_bins=(\d+)", text).group(1))
    assert bins >= 4, text  # four heads, four hues 90 degrees apart


def test_report_model_view_grid_selects_layer_and_head(tmp_path, rng):
    """bertviz's model view: a thumbnail per (layer, head); clicking one
    shows that layer and head in the heat map (the page's own self-test)."""
    stack = np.stack([_causal(rng, L=5, heads=3) for _ in range(4)])  # [4 layers, 3 heads, 5, 5]
    path = attn.report(tmp_path / "grid.html", stack, layer_ids=[0, 2, 4, 6])
    text = run_selftest(path, "&grid=2:1", tmp_path)
    m = re.search(r"grid thumbs=(\d+) shown=(\d+):(\d+) title=layer 4 · head 1 · largest weight (\S+)", text)
    assert m, text
    assert (int(m.group(1)), int(m.group(2)), int(m.group(3))) == (12, 2, 1)
    assert float(m.group(4)) == pytest.approx(float(stack[2, 1].max()), rel=1e-3)
