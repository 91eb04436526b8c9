"""attn.mha_forward / attn.mha_backward against the module composed by hand
from projections and the float64 reference."""

import numpy as np
import pytest

import attn
from conftest import ATOL, RTOL, rand, reference


def compose(x, wq, wk, wv, wo, bq, bk, bv, bo, heads, kv_heads, context=None, causal=False):
    """The module in float64, from attn.h's formulas."""
    x = x.astype(np.float64)
    c = x if context is None else context.astype(np.float64)
    b, l, _ = x.shape
    s = c.shape[1]
    q = (x @ wq + bq).reshape(b, l, heads, -1)
    k = (c @ wk + bk).reshape(b, s, kv_heads, -1)
    v = (c @ wv + bv).reshape(b, s, kv_heads, -1)
    z = reference(q, k, v, causal=causal)[0].reshape(b, l, -1)
    return z @ wo + bo


@pytest.fixture
def module(rng):
    d_model, hq, hkv, d, dv, d_out = 6, 4, 2, 3, 5, 7
    return dict(wq=rand(rng, d_model, hq * d), wk=rand(rng, d_model, hkv * d),
                wv=rand(rng, d_model, hkv * dv), wo=rand(rng, hq * dv, d_out),
                bq=rand(rng, hq * d), bk=rand(rng, hkv * d), bv=rand(rng, hkv * dv), bo=rand(rng, d_out),
                heads=hq, kv_heads=hkv)


def test_mha_forward_matches_composition(rng, module):
    x = rand(rng, 2, 5, 6)
    out, w = attn.mha_forward(x, causal=True, return_weights=True, **module)
    assert out.shape == (2, 5, 7) and w.shape == (2, 4, 5, 5)
    np.testing.assert_allclose(out, compose(x, **module, causal=True), rtol=RTOL, atol=1e-5)
    ctx = rand(rng, 2, 9, 6)
    np.testing.assert_allclose(attn.mha_forward(x, context=ctx, **module), compose(x, **module, context=ctx),
                               rtol=RTOL, atol=1e-5)
    out2 = attn.mha_forward(x[0], causal=True, **module)  # [L, d_model] shorthand
    np.testing.assert_allclose(out2, out[0], rtol=RTOL, atol=ATOL)


def test_mha_backward_matches_finite_differences(rng, module):
    x = rand(rng, 1, 3, 6)
    dout = rand(rng, 1, 3, 7)
    grads = attn.mha_backward(x, dout, causal=True, **module)
    assert set(grads) == {"dx", "dwq", "dwk", "dwv", "dwo", "dbq", "dbk", "dbv", "dbo"}
    params = {n: module[n].astype(np.float64) for n in ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo")}
    heads = dict(heads=module["heads"], kv_heads=module["kv_heads"])
    eps = 1e-6
    for name, g in (("x", grads["dx"]), ("wq", grads["dwq"]), ("bo", grads["dbo"]), ("wv", grads["dwv"])):
        base = x.astype(np.float64) if name == "x" else params[name]
        num = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            vals = []
            for step in (eps, -eps):
                moved = base.copy()
                moved[idx] += step
                xx = moved if name == "x" else x.astype(np.float64)
                pp = dict(params, **({} if name == "x" else {name: moved}))
                vals.append(float((compose(xx, **pp, **heads, causal=True) * dout).sum()))
            num[idx] = (vals[0] - vals[1]) / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=1e-4, atol=1e-4, err_msg=name)


def test_mha_refusals(rng, module):
    x = rand(rng, 2, 5, 6)
    with pytest.raises(attn.ShapeError, match="C-contiguous"):
        attn.mha_forward(x, **dict(module, wq=np.asfortranarray(module["wq"])))
    with pytest.raises(attn.ShapeError, match="bq"):
        attn.mha_forward(x, **dict(module, bq=module["bq"][:-1]))
    with pytest.raises(TypeError, match="wk is None"):
        attn.mha_forward(x, **dict(module, wk=None))
    with pytest.raises(attn.ShapeError, match="multiple"):
        attn.mha_forward(x, **dict(module, heads=5))
