"""attn.torch.scaled_dot_product_attention against torch's own, forward and
gradients, on a randomized sweep; attn.sdpa on torch tensors.  Skips when
torch is not installed."""

import math

import numpy as np
import pytest

import attn
from conftest import ATOL, RTOL

SWEEP = 40  # random cases, each a different combination of the features


def _case(torch, gen, i):
    """The i-th random problem: (query, key, value, kwargs) in torch's layout."""
    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    b, hkv, group = pick([1, 2, 3]), pick([1, 2, 4]), pick([1, 2, 4])
    hq = hkv * group
    l, s = pick([1, 3, 17, 40]), pick([1, 5, 17, 33])
    d, dv = pick([1, 8, 40]), pick([3, 8, 16])
    if i % 5 == 0:
        s = l  # self-attention
    q = torch.randn(b, hq, l, d, generator=gen)
    k = torch.randn(b, hkv, s, d, generator=gen)
    v = torch.randn(b, hkv, s, dv, generator=gen)
    kw = dict(enable_gqa=group > 1 or pick([False, True]))
    kind = i % 4
    if kind == 1:
        kw["is_causal"] = True
    elif kind == 2:  # boolean mask, broadcast over some axes
        shape = pick([(l, s), (b, 1, l, s), (1, hq, l, s), (b, hq, l, s), (b, 1, 1, s), (1, s)])
        kw["attn_mask"] = torch.rand(shape, generator=gen) > 0.3
    elif kind == 3:  # additive float mask
        shape = pick([(l, s), (b, hq, l, s), (1, hq, 1, s)])
        kw["attn_mask"] = torch.randn(shape, generator=gen)
    if pick([False, True]):
        kw["scale"] = float(torch.rand(1, generator=gen)) + 0.1
    return q, k, v, kw


def _ref(torch, q, k, v, kw):
    """torch's SDPA in float64 (the oracle), with fully masked rows as attn's 0."""
    kw64 = dict(kw)
    if "attn_mask" in kw64 and kw64["attn_mask"].is_floating_point():
        kw64["attn_mask"] = kw64["attn_mask"].double()
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw64)


@pytest.mark.parametrize("i", range(SWEEP))
def test_drop_in_matches_torch(torch, i):
    import attn.torch as at

    gen = torch.Generator().manual_seed(1000 + i)
    q, k, v, kw = _case(torch, gen, i)
    ours = at.scaled_dot_product_attention(q, k, v, **kw)
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)
    oracle = _ref(torch, q, k, v, kw)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert not torch.isnan(ours).any()
    oracle = torch.nan_to_num(oracle, nan=0.0)  # attn: a row that sees no key is 0
    np.testing.assert_allclose(ours.numpy(), oracle.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(ours.numpy(), torch.nan_to_num(theirs).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("i", range(0, SWEEP, 3))
def test_gradients_match_torch_autograd(torch, i):
    import attn.torch as at

    gen = torch.Generator().manual_seed(2000 + i)
    q, k, v, kw = _case(torch, gen, i)
    dout = torch.randn(q.shape[0], q.shape[1], q.shape[2], v.shape[3], generator=gen)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    ours = torch.autograd.grad(at.scaled_dot_product_attention(*leaves, **kw), leaves, dout)
    leaves64 = [x.double().requires_grad_() for x in (q, k, v)]
    kw64 = dict(kw)
    if "attn_mask" in kw64 and kw64["attn_mask"].is_floating_point():
        kw64["attn_mask"] = kw64["attn_mask"].double()
    out64 = torch.nn.functional.scaled_dot_product_attention(*leaves64, **kw64)
    theirs = torch.autograd.grad(out64, leaves64, dout.double())
    for name, a, b in zip("qkv", ours, theirs):
        assert a.shape == b.shape, name
        b = torch.nan_to_num(b, nan=0.0)
        # Relative to the gradient's largest element: a gradient sums L or S
        # products, and its small elements carry the big ones' rounding
        # (torch's own float32 gradients are off by 2-5e-6 on the same cases).
        err = float((a.double() - b).abs().max())
        assert err <= RTOL * max(1.0, float(b.abs().max())), f"d{name}: max error {err:.3g}"


@pytest.mark.filterwarnings("ignore:Input #:UserWarning")  # gradcheck's advice to use float64
def test_gradcheck_style_finite_differences(torch):
    """torch.autograd.gradcheck's check (analytic vs numerical Jacobian) in
    float32: attn computes float32, so the step and tolerance are fp32's."""
    import attn.torch as at

    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 3, 4, generator=gen, dtype=torch.float64).float().requires_grad_()
               for _ in range(3))
    assert torch.autograd.gradcheck(
        lambda a, b, c: at.scaled_dot_product_attention(a, b, c, is_causal=True), (q, k, v),
        eps=1e-2, atol=2e-3, rtol=2e-3)


def test_fully_masked_rows(torch):
    """attn: output 0 and gradients finite.  torch >= 2.5 also gives 0 here;
    older versions gave NaN (docs/python.md)."""
    import attn.torch as at

    q, k, v = (torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False
    out = at.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (out[:, :, 1] == 0).all() and not torch.isnan(out).any()
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[:, :, 1] == 0).all()
    bias = torch.zeros(4, 4)
    bias[2] = -math.inf
    out = at.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert (out[:, :, 2] == 0).all()


def test_cross_attention_and_value_width(torch):
    import attn.torch as at

    q, k, v = torch.randn(2, 3, 5, 16), torch.randn(2, 3, 9, 16), torch.randn(2, 3, 9, 4)
    out = at.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(out.numpy(), _ref(torch, q, k, v, {}).numpy(), rtol=RTOL, atol=ATOL)


def test_3d_and_5d_inputs(torch):
    import attn.torch as at

    q, k, v = torch.randn(3, 5, 8), torch.randn(3, 7, 8), torch.randn(3, 7, 8)
    np.testing.assert_allclose(at.scaled_dot_product_attention(q, k, v, is_causal=True).numpy(),
                               _ref(torch, q, k, v, dict(is_causal=True)).numpy(), rtol=RTOL, atol=ATOL)
    q, k, v = torch.randn(2, 2, 3, 5, 8), torch.randn(2, 2, 3, 7, 8), torch.randn(2, 2, 3, 7, 8)
    m = torch.rand(2, 1, 1, 5, 7) > 0.2
    np.testing.assert_allclose(at.scaled_dot_product_attention(q, k, v, attn_mask=m).numpy(),
                               torch.nan_to_num(_ref(torch, q, k, v, dict(attn_mask=m))).numpy(),
                               rtol=RTOL, atol=ATOL)


def test_refusals(torch):
    import attn.torch as at

    q = torch.randn(1, 4, 3, 8)
    kv = torch.randn(1, 2, 3, 8)
    with pytest.raises(attn.UnsupportedError, match="dropout"):
        at.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(attn.ShapeError, match="enable_gqa"):
        at.scaled_dot_product_attention(q, kv, kv)
    with pytest.raises(attn.ArgumentError, match="is_causal"):
        at.scaled_dot_product_attention(q, q, q, is_causal=True, attn_mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="float64"):
        at.scaled_dot_product_attention(q.double(), q.double(), q.double())
    with pytest.raises(TypeError, match="share a dtype"):
        at.scaled_dot_product_attention(q, q.double(), q)
    with pytest.raises(attn.UnsupportedError, match="requires grad"):
        at.scaled_dot_product_attention(q, q, q, attn_mask=torch.zeros(3, 3, requires_grad=True))
    if torch.cuda.is_available():
        with pytest.raises(TypeError, match="device"):
            at.scaled_dot_product_attention(q.cuda(), q.cuda(), q.cuda())


def test_sdpa_on_torch_tensors_returns_torch(torch):
    q = torch.randn(2, 5, 4, 8)  # [B, L, H, D]
    out = attn.sdpa(q, q, q, causal=True)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 5, 4, 8)
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), q.transpose(1, 2),
                                                           q.transpose(1, 2), is_causal=True)
    np.testing.assert_allclose(out.numpy(), ref.transpose(1, 2).numpy(), rtol=1e-4, atol=1e-5)
    for dtype in (torch.float16, torch.bfloat16):
        try:
            o = attn.sdpa(q.to(dtype), q.to(dtype), q.to(dtype))
        except attn.UnsupportedError:
            continue  # main's kernels compute float32 only; the dtype reached the library
        assert o.dtype == dtype
