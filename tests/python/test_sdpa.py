"""attn.sdpa and attn.sdpa_backward on numpy arrays, against a float64
reference written from docs/semantics.md (no torch needed)."""

import numpy as np
import pytest

import attn
from conftest import ATOL, RTOL, rand, reference


def test_version_is_the_library_version():
    assert attn.__version__ == attn._core.__version__ == attn._core.header_version
    assert attn.__version__.count(".") == 2


@pytest.mark.parametrize("b,l,s,hq,hkv,d,dv", [(1, 1, 1, 1, 1, 1, 1), (3, 17, 5, 4, 2, 40, 7),
                                               (2, 3, 113, 8, 1, 16, 16), (1, 9, 9, 2, 2, 80, 3)])
@pytest.mark.parametrize("causal", [False, "top-left", "lower-right"])
def test_forward_matches_reference(rng, b, l, s, hq, hkv, d, dv, causal):
    q, k, v = rand(rng, b, l, hq, d), rand(rng, b, s, hkv, d), rand(rng, b, s, hkv, dv)
    out, w, lse = attn.sdpa(q, k, v, causal=causal, return_weights=True, return_lse=True)
    ro, rw, rl = reference(q, k, v, causal=bool(causal), align=causal or "top-left")
    np.testing.assert_allclose(out, ro, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(w, rw, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(lse, rl, rtol=RTOL, atol=ATOL)


def test_bhld_layout_is_the_transpose(rng):
    q, k, v = rand(rng, 2, 4, 6, 8), rand(rng, 2, 2, 9, 8), rand(rng, 2, 2, 9, 5)  # [B, H, L, D]
    out = attn.sdpa(q, k, v, layout="BHLD", causal=True)
    assert out.shape == (2, 4, 6, 5)
    ro, _, _ = reference(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), causal=True)
    np.testing.assert_allclose(out, ro.transpose(0, 2, 1, 3), rtol=RTOL, atol=ATOL)


def test_shorthands(rng):
    q, k, v = rand(rng, 5, 4), rand(rng, 6, 4), rand(rng, 6, 3)
    out, w, lse = attn.sdpa(q, k, v, return_weights=True, return_lse=True)
    assert out.shape == (5, 3) and w.shape == (5, 6) and lse.shape == (5,)
    ro, rw, _ = reference(q[None, :, None], k[None, :, None], v[None, :, None])
    np.testing.assert_allclose(out, ro[0, :, 0], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(w, rw[0, 0], rtol=RTOL, atol=ATOL)
    q3, k3, v3 = rand(rng, 5, 2, 4), rand(rng, 6, 2, 4), rand(rng, 6, 2, 3)  # [L, H, D]
    out3 = attn.sdpa(q3, k3, v3)
    np.testing.assert_allclose(out3, reference(q3[None], k3[None], v3[None])[0][0], rtol=RTOL, atol=ATOL)


def test_the_chapter_example():
    c = np.sqrt(2.0) * np.log(2.0)
    q = np.array([[1, 0], [0, 1], [1, 1]], np.float32)
    k = np.array([[c, 0], [0, c], [c, c]], np.float32)
    v = np.array([[2, 0], [0, 1], [2, 1]], np.float32)
    out, w = attn.sdpa(q, k, v, causal=True, return_weights=True)
    np.testing.assert_allclose(w[1, :2], [1 / 3, 2 / 3], rtol=RTOL)  # scores 0 and ln 2
    ro, rw, _ = reference(q[None, :, None], k[None, :, None], v[None, :, None], causal=True)
    np.testing.assert_allclose(out, ro[0, :, 0], rtol=RTOL, atol=ATOL)


def test_masks_bias_window_key_lengths(rng):
    b, l, s, h, d = 2, 7, 11, 3, 8
    q, k, v = rand(rng, b, l, h, d), rand(rng, b, s, h, d), rand(rng, b, s, h, d)
    mask = rng.random((b, 1, l, s)) > 0.3
    bias = rand(rng, 1, h, 1, s)
    lens = np.array([11, 4])
    out = attn.sdpa(q, k, v, mask=mask, bias=bias, key_lengths=lens, scale=0.7)
    ro, _, _ = reference(q, k, v, mask=mask, bias=bias, key_lengths=lens, scale=0.7)
    np.testing.assert_allclose(out, ro, rtol=RTOL, atol=ATOL)
    # window (1, 0) lower-right: each query sees its diagonal key and one before
    out, w = attn.sdpa(q, k, v, causal="lower-right", window=(1, 0), return_weights=True)
    assert ((w > 0).sum(axis=-1) == 2).all()


def test_fully_masked_rows_are_zero_never_nan(rng):
    q, k, v = rand(rng, 1, 4, 2, 8), rand(rng, 1, 5, 2, 8), rand(rng, 1, 5, 2, 8)
    mask = np.ones((4, 5), bool)
    mask[2] = False
    out, w, lse = attn.sdpa(q, k, v, mask=mask, return_weights=True, return_lse=True)
    assert not np.isnan(out).any()
    assert (out[0, 2] == 0).all() and (w[0, :, 2] == 0).all() and np.isneginf(lse[0, :, 2]).all()
    dq, dk, dv = attn.sdpa_backward(q, k, v, np.ones_like(out), mask=mask)
    assert np.isfinite(dq).all() and (dq[0, 2] == 0).all()


def test_backward_matches_finite_differences(rng):
    q, k, v = rand(rng, 1, 3, 2, 4), rand(rng, 1, 4, 1, 4), rand(rng, 1, 4, 1, 2)
    dout = rand(rng, 1, 3, 2, 2)
    out, lse = attn.sdpa(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = attn.sdpa_backward(q, k, v, dout, out=out, lse=lse, causal=True)
    dq2, dk2, dv2 = attn.sdpa_backward(q, k, v, dout, causal=True, kernel="ref")
    for a, c in ((dq, dq2), (dk, dk2), (dv, dv2)):
        np.testing.assert_allclose(a, c, rtol=RTOL, atol=ATOL)

    def loss(qq, kk, vv):
        return float((reference(qq, kk, vv, causal=True)[0] * dout).sum())

    eps = 1e-6
    for x, g in ((q, dq), (k, dk), (v, dv)):
        x64 = x.astype(np.float64)
        num = np.zeros_like(x64)
        for idx in np.ndindex(x.shape):
            plus, minus = x64.copy(), x64.copy()
            plus[idx] += eps
            minus[idx] -= eps
            args_p = [plus if y is x else y.astype(np.float64) for y in (q, k, v)]
            args_m = [minus if y is x else y.astype(np.float64) for y in (q, k, v)]
            num[idx] = (loss(*args_p) - loss(*args_m)) / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=1e-4, atol=1e-5)


def test_backward_bhld_shapes(rng):
    q, k, v = rand(rng, 2, 4, 6, 8), rand(rng, 2, 2, 9, 8), rand(rng, 2, 2, 9, 5)
    dq, dk, dv = attn.sdpa_backward(q, k, v, rand(rng, 2, 4, 6, 5), layout="BHLD")
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


def test_half_dtypes_are_computed(rng):
    """float16 storage, float32 arithmetic (docs/half.md): the output is the
    float64 reference of the same (already rounded) inputs, rounded once to
    float16 (unit roundoff 2^-11), so 2^-10 relative covers it."""
    q, k, v = (rand(rng, 2, 7, 4, 16, dtype=np.float16) for _ in range(3))
    out = attn.sdpa(q, k, v, causal=True)
    assert out.dtype == np.float16
    assert attn._core.last_pointers()["q"] == q.__array_interface__["data"][0]  # read in place
    ro, _, _ = reference(q, k, v, causal=True)
    np.testing.assert_allclose(out.astype(np.float64), ro, rtol=2.0**-10, atol=2.0**-14)
    # mixed: float32 queries over float16 keys and values
    out32 = attn.sdpa(q.astype(np.float32), k, v, causal=True)
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, ro, rtol=1e-5, atol=1e-6)


def test_trace_has_transformerlens_hooks(rng):
    q, k, v = rand(rng, 2, 5, 4, 8), rand(rng, 2, 6, 2, 8), rand(rng, 2, 6, 2, 3)
    mask = rng.random((5, 6)) > 0.3
    hooks = attn.trace(q, k, v, causal="lower-right", mask=mask)
    assert sorted(hooks) == sorted(["hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z"])
    out, w = attn.sdpa(q, k, v, causal="lower-right", mask=mask, return_weights=True)
    np.testing.assert_array_equal(hooks["hook_z"], out)  # bit-identical to the forward
    np.testing.assert_array_equal(hooks["hook_q"], q)
    np.testing.assert_allclose(hooks["hook_pattern"], w, rtol=RTOL, atol=ATOL)
    assert np.isneginf(hooks["hook_attn_scores"][:, :, ~mask]).all()
    # torch's layout in, TransformerLens's order out
    bhld = attn.trace(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3),
                      causal="lower-right", mask=mask, layout="BHLD")
    np.testing.assert_array_equal(bhld["hook_z"], out)


def test_paths_add_up():
    """The five runs of attn_sdpa_paths and their interaction (the chapter's
    numbers are checked by the C tests, tests/interp/)."""
    rng = np.random.default_rng(5)
    q, k, v = rand(rng, 1, 3, 1, 2), rand(rng, 1, 3, 1, 2), rand(rng, 1, 3, 1, 2)
    k2, v2 = rand(rng, 1, 3, 1, 2), rand(rng, 1, 3, 1, 2)
    p = attn.paths(q, k, v, k_changed=k2, v_changed=v2, causal=True)
    assert set(p) == {"base", "K only", "V only", "both", "changed", "interaction_z"}
    z = {name: p[name]["hook_z"] for name in ("base", "K only", "V only", "both")}
    np.testing.assert_allclose(p["interaction_z"], z["both"] - z["K only"] - z["V only"] + z["base"],
                               rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(z["base"], attn.sdpa(q, k, v, causal=True))
    np.testing.assert_allclose(z["both"], reference(q, k2, v2, causal=True)[0], rtol=RTOL, atol=ATOL)


def test_nullspace_keeps_the_output():
    w = np.array([0.25, 0.25, 0.25, 0.25], np.float32)
    vals = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], np.float32)  # keys 0 and 2 are the same value
    moved, info = attn.nullspace(w, vals, tolerance=1e-6)
    assert info["exact"] and info["l1"] == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(moved @ vals, w @ vals, atol=1e-6)
    assert moved.sum() == pytest.approx(1.0)
    with pytest.raises(attn.ShapeError):
        attn.nullspace(w, vals[:3], tolerance=0.0)


def test_heatmap_writes_a_picture(tmp_path, rng):
    q = rand(rng, 1, 4, 2, 8)
    _, w = attn.sdpa(q, q, q, causal=True, return_weights=True)
    path = tmp_path / "map.png"
    if not attn.pictures_available():
        with pytest.raises(attn.UnsupportedError):
            attn.heatmap(path, w[0])
        pytest.skip("this build has no cairo: pictures are off")
    attn.heatmap(path, w[0], query_labels=["我", "吃", "了", "饭"], title="causal", visible=w[0] > 0)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(attn.ShapeError, match="labels"):
        attn.heatmap(tmp_path / "bad.png", w[0], query_labels=["a"])
    with pytest.raises(attn.FileError):
        attn.heatmap(tmp_path / "no" / "such" / "dir.png", w[0])


def test_numpy_bfloat16_is_computed(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes (numpy's bfloat16) is not installed")
    q, k, v = (rand(rng, 1, 9, 2, 8).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = attn.sdpa(q, k, v)
    assert out.dtype == q.dtype
    assert attn._core.last_pointers()["q"] == q.__array_interface__["data"][0]
    ro, _, _ = reference(*(x.astype(np.float64) for x in (q, k, v)))
    # one rounding to bfloat16 (unit roundoff 2^-8)
    np.testing.assert_allclose(out.astype(np.float64), ro, rtol=2.0**-7, atol=2.0**-12)


@pytest.mark.parametrize("seed", range(12))
def test_random_rules_match_reference(seed):
    """Every visibility rule at once, random: causal in both alignments,
    windows, key lengths, masks and biases broadcast, GQA, both layouts."""
    rng = np.random.default_rng(seed)
    b, hkv, group = rng.integers(1, 4), rng.integers(1, 3), rng.choice([1, 2, 4])
    hq, l, s = hkv * group, int(rng.choice([1, 3, 17])), int(rng.choice([1, 5, 33]))
    d, dv = int(rng.choice([1, 8, 40])), int(rng.choice([3, 16]))
    q, k, v = rand(rng, b, l, hq, d), rand(rng, b, s, hkv, d), rand(rng, b, s, hkv, dv)
    kw = {}
    if rng.random() < 0.5:
        kw["causal"] = str(rng.choice(["top-left", "lower-right"]))
    if rng.random() < 0.5:
        kw["window"] = (int(rng.integers(-1, 4)), int(rng.integers(-1, 4)))
    if rng.random() < 0.5:
        kw["key_lengths"] = rng.integers(0, s + 1, size=b)
    if rng.random() < 0.5:
        shape = [(l, s), (b, 1, l, s), (1, hq, 1, s)][rng.integers(3)]
        kw["mask"] = rng.random(shape) > 0.3
    if rng.random() < 0.5:
        kw["bias"] = rand(rng, *[(l, s), (1, hq, l, 1)][rng.integers(2)])
    if rng.random() < 0.5:
        kw["scale"] = float(rng.random() + 0.1)
    ref_kw = dict(kw)
    if "causal" in ref_kw:
        ref_kw["align"] = ref_kw["causal"]
        ref_kw["causal"] = True
    elif "window" in ref_kw:
        ref_kw["align"] = "top-left"
    ro, rw, rl = reference(q, k, v, **ref_kw)
    layout = "BHLD" if seed % 2 else "BLHD"
    t = (lambda x: x.transpose(0, 2, 1, 3)) if layout == "BHLD" else (lambda x: x)
    out, w, lse = attn.sdpa(t(q), t(k), t(v), layout=layout, return_weights=True, return_lse=True, **kw)
    np.testing.assert_allclose(t(out), ro, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(w, rw, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(lse, rl, rtol=RTOL, atol=ATOL)
    assert not np.isnan(out).any()


def score_stage_reference(q, k, v, *, causal=False, softcap=None, sinks=None, slopes=None):
    """docs/logits.md's score stage in float64, written here from the formula:
    s = softcap(scale q.k) + slope_h (j - i), the causal mask, the sink in the
    denominator; returns (out [B, L, Hq, Dv], lse [B, Hq, L])."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, l, hq, d = q.shape
    s_len, hkv = k.shape[1], k.shape[2]
    kk, vv = np.repeat(k, hq // hkv, axis=2), np.repeat(v, hq // hkv, axis=2)
    s = np.einsum("blhd,bshd->bhls", q, kk) / np.sqrt(d)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    i, j = np.arange(l)[:, None], np.arange(s_len)[None, :]
    if slopes is not None:
        s = s + np.asarray(slopes, dtype=np.float64)[None, :, None, None] * (j - i)[None, None]
    if causal:
        s = np.where(j <= i, s, -np.inf)
    sink = np.full(hq, -np.inf) if sinks is None else np.asarray(sinks, dtype=np.float64)
    m = np.maximum(s.max(axis=-1), sink[None, :, None])
    e = np.exp(s - m[..., None])
    denom = e.sum(axis=-1) + np.exp(sink[None, :, None] - m)
    out = np.einsum("bhls,bshd->blhd", e / denom[..., None], vv)
    return out, m + np.log(denom)


def test_score_stage_matches_the_formula(rng):
    q, k, v = rand(rng, 2, 5, 4, 8) * 3, rand(rng, 2, 7, 2, 8) * 3, rand(rng, 2, 7, 2, 6)
    sinks = np.array([0.5, -1.0, 2.0, -np.inf], dtype=np.float32)
    slopes = np.array([0.25, 0.0625, 0.015625, 0.00390625], dtype=np.float32)  # the paper's, 4 heads
    cases = [dict(softcap=2.0), dict(sinks=sinks), dict(alibi=slopes), dict(softcap=1.5, sinks=sinks, alibi=slopes)]
    for causal in (False, True):
        for kw in cases:
            want_out, want_lse = score_stage_reference(q, k, v, causal=causal, softcap=kw.get("softcap"),
                                                       sinks=kw.get("sinks"), slopes=kw.get("alibi"))
            for kernel in ("ref", "flash"):
                out, lse = attn.sdpa(q, k, v, causal=causal, kernel=kernel, return_lse=True, **kw)
                np.testing.assert_allclose(out, want_out, rtol=RTOL, atol=ATOL, err_msg=f"{kw} {kernel}")
                np.testing.assert_allclose(lse, want_lse, rtol=RTOL, atol=ATOL, err_msg=f"{kw} {kernel}")
    # alibi=True is the ALiBi paper's geometric slopes 2^(-8 h / Hq), h = 1 .. Hq.
    np.testing.assert_array_equal(attn.sdpa(q, k, v, alibi=True), attn.sdpa(q, k, v, alibi=slopes))


def test_sinks_gradient_matches_finite_differences(rng):
    q, k, v = rand(rng, 1, 3, 2, 4), rand(rng, 1, 4, 1, 4), rand(rng, 1, 4, 1, 2)
    dout = rand(rng, 1, 3, 2, 2)
    sinks = np.array([0.3, -0.7], dtype=np.float32)
    dq, dk, dv, dsinks = attn.sdpa_backward(q, k, v, dout, causal=True, sinks=sinks, softcap=3.0)
    assert dsinks.shape == (2,) and dsinks.dtype == np.float32

    def loss(qq, kk, vv, ss):
        return float((score_stage_reference(qq, kk, vv, causal=True, softcap=3.0, sinks=ss)[0] * dout).sum())

    eps = 1e-6
    base = [x.astype(np.float64) for x in (q, k, v, sinks)]
    for n, g in enumerate((dq, dk, dv, dsinks)):
        num = np.zeros_like(base[n])
        for idx in np.ndindex(base[n].shape):
            plus, minus = [x.copy() for x in base], [x.copy() for x in base]
            plus[n][idx] += eps
            minus[n][idx] -= eps
            num[idx] = (loss(*plus) - loss(*minus)) / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=1e-4, atol=1e-5, err_msg=f"gradient {n}")
    # Without sinks, three gradients as before.
    assert len(attn.sdpa_backward(q, k, v, dout, causal=True)) == 3


def test_score_stage_refuses_bad_values(rng):
    q = rand(rng, 1, 3, 2, 4)
    with pytest.raises(attn.ShapeError, match="sinks"):
        attn.sdpa(q, q, q, sinks=[0.0, 1.0, 2.0])
    with pytest.raises(attn.ShapeError, match="alibi"):
        attn.sdpa(q, q, q, alibi=np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="softcap"):
        attn.sdpa(q, q, q, softcap=-1.0)
    with pytest.raises(TypeError, match="softcap"):
        attn.sdpa(q, q, q, softcap="big")
    with pytest.raises(attn.Error):
        attn.sdpa(q, q, q, sinks=[np.nan, 0.0])


@pytest.mark.parametrize("causal,alias", [(False, "k"), ("top-left", "v"), (False, "q")])
def test_out_over_an_input_is_refused(rng, causal, alias):
    # issue 33: out=k computed a wrong, thread-dependent answer ([1, 512, 2, 64]).
    q, k, v = rand(rng, 1, 512, 2, 64), rand(rng, 1, 512, 2, 64), rand(rng, 1, 512, 2, 64)
    given = {"q": q, "k": k, "v": v}[alias]
    before = given.copy()
    with pytest.raises(attn.ArgumentError, match=f"out overlaps {alias} in memory"):
        attn.sdpa(q, k, v, causal=causal, out=given)
    np.testing.assert_array_equal(given, before)


def test_out_beside_its_inputs_in_one_buffer_is_accepted(rng):
    # Views of one array that only touch are separate buffers.
    whole = rand(rng, 4, 7, 2, 8)
    q, k, v, out = whole[0], whole[1], whole[2], whole[3]
    attn.sdpa(q, k, v, out=out)
    np.testing.assert_allclose(out, reference(q[None], k[None], v[None])[0][0], rtol=RTOL, atol=ATOL)
