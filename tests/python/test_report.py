"""attn.report: the self-contained HTML report from Python (attn_report_write_html).

What the page holds is checked two independent ways: the weights embedded in
its JSON decode to exactly the float32 values passed in (the reference is the
caller's own array, computed here by a float64 formula, not by the report),
and, where a Chromium is installed, the page's own self-test hovers cells
through its selectors and must show those very weights (bit for bit).
"""

import base64
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import attn
from conftest import rand, reference


def page_data(path):
    html = path.read_text(encoding="utf-8")
    m = re.search(r'<script type="application/json" id="attn-data">(.*?)</script>', html, re.S)
    assert m, "the report has no data element"
    return json.loads(m.group(1))


def layer_weights(data, layer):
    """The visible weights of a layer, in order, as the page stores them."""
    return np.frombuffer(base64.b64decode(data["weights"][layer]), dtype="<f4")


def chromium():
    for name in (os.environ.get("ATTN_CHROMIUM"), "chromium", "chromium-browser", "google-chrome-stable"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def run_selftest(path, fragment, tmp_path):
    """Opens path#selftest<fragment> in headless Chromium: the page's
    self-test text (no script errors, run to its end)."""
    browser = chromium()
    if not browser:
        pytest.skip("no Chromium found (Debian: apt-get install chromium; or set ATTN_CHROMIUM)")
    out = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--dump-dom", f"file://{path}#selftest{fragment}"],
        capture_output=True, text=True, timeout=120, check=True,
        # Not the sanitizer runtime the tests may run under (a preloaded ASan
        # would hang the browser).
        env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}).stdout
    errors = re.search(r'<pre id="errors">(.*?)</pre>', out, re.S)
    assert errors is not None and errors.group(1).strip() == "", errors and errors.group(1)
    text = re.search(r'<pre id="selftest">(.*?)</pre>', out, re.S).group(1)
    assert "status=done" in text, text
    return text


def selftest(path, cells, tmp_path):
    """Runs the page's #selftest in headless Chromium: {(layer, head, i, j): weight shown}."""
    text = run_selftest(path, "&cells=" + ";".join(":".join(str(x) for x in c) for c in cells), tmp_path)
    shown = {}
    for m in re.finditer(r"cell (\d+):(\d+):(\d+):(\d+) shown=\d+:\d+ hovered=(\d+),(\d+) weight=(\S+)", text):
        a, h, i, j, hi, hj, wt = m.groups()
        assert (hi, hj) == (i, j), m.group(0)
        shown[(int(a), int(h), int(i), int(j))] = np.float32(float(wt))
    return shown


def test_report_holds_the_exact_weights(tmp_path, rng):
    q, k, v = rand(rng, 1, 5, 2, 8), rand(rng, 1, 5, 2, 8), rand(rng, 1, 5, 2, 8)
    out, w = attn.sdpa(q, k, v, causal=True, return_weights=True)
    _, ref_w, _ = reference(q, k, v, causal=True)
    np.testing.assert_allclose(w, ref_w, rtol=1e-5, atol=1e-6)  # the weights are right to start with
    path = tmp_path / "report.html"
    labels = ["我", "吃", "了", "一个", "苹果"]
    assert attn.report(path, w[0], visible=w[0] > 0, query_labels=labels, title="causal") == str(path)
    data = page_data(path)
    assert data["heads"] == 2 and data["len_q"] == 5 and data["query_labels"] == labels
    assert data["packed"] is True  # the upper triangle is hidden: only visible cells are stored
    visible = np.tril(np.ones((5, 5), dtype=bool))
    expect = np.concatenate([w[0, h][visible] for h in range(2)])
    assert np.array_equal(layer_weights(data, 0), expect)  # bit for bit


def test_report_of_several_layers_switches_through_its_selectors(tmp_path, rng):
    layers = []
    for _ in range(3):
        q = rand(rng, 1, 4, 2, 8)
        _, w = attn.sdpa(q, q, q, causal=True, return_weights=True)
        layers.append(w[0])
    stack = np.stack(layers)  # [3, 2, 4, 4]
    path = tmp_path / "layers.html"
    attn.report(path, stack, visible=np.tril(np.ones((4, 4), dtype=bool)), layer_ids=[0, 5, 9],
                query_labels=list("abcd"), line=[1.0, 0.9, 0.5], line_labels=["embed", "0", "1"],
                line_title="cosine")
    data = page_data(path)
    assert data["layers"] == 3 and data["layer_ids"] == [0, 5, 9]
    assert data["line"]["values"] == [1.0, 0.9, 0.5]
    cells = [(2, 1, 3, 1), (0, 0, 2, 2), (1, 1, 1, 0)]
    shown = selftest(path, cells, tmp_path)
    for a, h, i, j in cells:
        assert shown[(a, h, i, j)] == stack[a, h, i, j], (a, h, i, j)


def test_report_with_paths(tmp_path, rng):
    q, k, v = rand(rng, 1, 4, 2, 8), rand(rng, 1, 4, 2, 8), rand(rng, 1, 4, 2, 8)
    k2 = k.copy()
    k2[0, 1] += 1.0
    p = attn.paths(q, k, v, k_changed=k2, causal=True)
    w = p["base"]["hook_pattern"][0]
    path = tmp_path / "paths.html"
    attn.report(path, w, visible=w > 0, paths=p)
    paths = page_data(path)["paths"]
    assert paths is not None
    # A changed key moves the weights only: the V-only run equals the base.
    np.testing.assert_array_equal(p["V only"]["hook_z"], p["base"]["hook_z"])
    with pytest.raises(attn.ShapeError, match="one layer"):
        attn.report(tmp_path / "bad.html", np.stack([w, w]), paths=p)


def test_report_refuses_bad_input(tmp_path, rng):
    w = np.full((2, 3, 3), 1 / 3, dtype=np.float32)
    with pytest.raises(TypeError, match="float32"):
        attn.report(tmp_path / "a.html", w.astype(np.float64))
    with pytest.raises(attn.ShapeError, match="labels"):
        attn.report(tmp_path / "b.html", w, query_labels=["x"])
    with pytest.raises(attn.ShapeError, match="broadcast"):
        attn.report(tmp_path / "c.html", w, visible=np.ones((4, 4), dtype=bool))
    with pytest.raises(TypeError, match="one string"):
        attn.report(tmp_path / "d.html", w, query_labels="abc")
    with pytest.raises(attn.FileError):
        attn.report(tmp_path / "no" / "such" / "dir.html", w)
    assert not (tmp_path / "a.html").exists() and not (tmp_path / "b.html").exists()
