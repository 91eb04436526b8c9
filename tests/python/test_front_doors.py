"""The front doors closed against silent wrong answers (issue 36):
attn.sdpa refuses a tensor that requires grad, warns on shapes that look
transposed; the torch drop-in takes attn's options with gradients and
torch's empty sizes.  Oracles: torch's own autograd on a float64 reference
written here from docs/semantics.md and docs/logits.md."""

import math
import warnings

import numpy as np
import pytest

import attn
from conftest import RTOL


def test_sdpa_refuses_tensors_that_require_grad(torch):
    q = torch.randn(1, 3, 2, 4, requires_grad=True)
    with pytest.raises(attn.UnsupportedError, match="attn.torch.scaled_dot_product_attention"):
        attn.sdpa(q, q, q)
    with pytest.raises(attn.UnsupportedError, match="requires grad"):
        attn.sdpa_backward(q.detach(), q.detach(), q.detach(), q)
    with torch.no_grad():  # no gradient wanted: allowed
        assert attn.sdpa(q, q, q).shape == q.shape
    assert attn.sdpa(q.detach(), q.detach(), q.detach()).shape == q.shape


def test_sdpa_warns_on_torch_layout_without_layout(torch, rng):
    q = rng.standard_normal((1, 4, 32, 16)).astype(np.float32)  # [B, H, L, D]: read as L=4, H=32
    with pytest.warns(attn.LayoutWarning, match="layout='BHLD'"):
        attn.sdpa(q, q, q)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attn.sdpa(q, q, q, layout="BLHD")  # said so: silent
        attn.sdpa(q, q, q, layout="BHLD")
        attn.sdpa(q.transpose(0, 2, 1, 3), q.transpose(0, 2, 1, 3), q.transpose(0, 2, 1, 3))  # BLHD
        one = q[:, :, :1]  # a decode step: one query, more heads than positions is normal
        attn.sdpa(one.transpose(0, 2, 1, 3), q[:, :, :2].transpose(0, 2, 1, 3), q[:, :, :2].transpose(0, 2, 1, 3))
    wide = rng.standard_normal((1, 2, 300, 8)).astype(np.float32)  # 300 "heads"
    with pytest.warns(attn.LayoutWarning, match="300 heads"):
        attn.trace(wide, wide, wide)


def _reference(torch, q, k, v, *, causal=False, window=None, softcap=None, alibi=None, sinks=None,
               key_lengths=None, scale=None):
    """float64 attention in torch's layout with attn's options, top-left
    diagonal; a row that sees no key gives 0."""
    b, hq, l, d = q.shape
    group = hq // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    i = torch.arange(l, dtype=torch.float64)[:, None]
    j = torch.arange(s, dtype=torch.float64)[None, :]
    if alibi is not None:
        scores = scores + alibi.double()[None, :, None, None] * (j - i)
    visible = torch.ones(b, hq, l, s, dtype=torch.bool)
    if causal:
        visible &= j <= i
    if window is not None:
        left, right = window
        if left >= 0:
            visible &= j >= i - left
        if right >= 0:
            visible &= j <= i + right
    if key_lengths is not None:
        visible &= torch.arange(s)[None, None, None, :] < key_lengths[:, None, None, None]
    scores = scores.masked_fill(~visible, -math.inf)
    if sinks is not None:
        sink = sinks[None, :, None, None].expand(b, hq, l, 1)
        scores = torch.cat([scores, sink], dim=-1)
    top = scores.max(-1, keepdim=True).values.detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e = torch.exp(scores - top)
    w = e / e.sum(-1, keepdim=True).clamp_min(1e-300)
    if sinks is not None:
        w = w[..., :-1]
    return w @ v


OPTION_CASES = [
    dict(window_size=(2, 0), is_causal=True),
    dict(window_size=(1, 1)),
    dict(softcap=2.0, is_causal=True),
    dict(alibi_slopes=True, is_causal=True),
    dict(sinks=True),
    dict(sinks=True, is_causal=True, softcap=5.0),
    dict(key_lengths=True),
    dict(key_lengths=True, window_size=(3, -1), alibi_slopes=True, is_causal=True),
]


@pytest.mark.parametrize("case", range(len(OPTION_CASES)))
def test_drop_in_options_forward_and_gradients(torch, case):
    import attn.torch as at

    gen = torch.Generator().manual_seed(50 + case)
    b, hq, hkv, l, s, d = 2, 4, 2, 6, 6, 8
    q = torch.randn(b, hq, l, d, generator=gen)
    k = torch.randn(b, hkv, s, d, generator=gen)
    v = torch.randn(b, hkv, s, d, generator=gen)
    kw = dict(OPTION_CASES[case], enable_gqa=True)
    ref_kw = dict(causal=kw.get("is_causal", False), window=kw.get("window_size"), softcap=kw.get("softcap"))
    sinks = None
    if kw.get("alibi_slopes"):
        kw["alibi_slopes"] = torch.tensor([0.5, 0.25, 0.125, 0.0625])
        ref_kw["alibi"] = kw["alibi_slopes"]
    if kw.get("sinks"):
        sinks = torch.randn(hq, generator=gen)
        kw["sinks"] = sinks.clone().requires_grad_()
    if kw.get("key_lengths"):
        kw["key_lengths"] = torch.tensor([4, 6])
        ref_kw["key_lengths"] = kw["key_lengths"]
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = at.scaled_dot_product_attention(*leaves, **kw)
    leaves64 = [x.double().requires_grad_() for x in (q, k, v)]
    sinks64 = None if sinks is None else sinks.double().requires_grad_()
    ref = _reference(torch, *leaves64, sinks=sinks64, **ref_kw)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=RTOL, atol=1e-5)
    dout = torch.randn(out.shape, generator=gen)
    ours = torch.autograd.grad(out, leaves + ([kw["sinks"]] if sinks is not None else []), dout)
    theirs = torch.autograd.grad(ref, leaves64 + ([sinks64] if sinks is not None else []), dout.double())
    for name, a, t in zip(["dq", "dk", "dv", "dsinks"], ours, theirs):
        err = float((a.double() - t).abs().max())
        assert err <= 1e-5 * max(1.0, float(t.abs().max())), f"{name}: max error {err:.3g}"


def test_drop_in_empty_sizes_as_torch(torch):
    import attn.torch as at
    sdpa = torch.nn.functional.scaled_dot_product_attention

    for l, s in ((0, 5), (3, 0), (0, 0)):
        q = torch.randn(2, 3, l, 4, requires_grad=True)
        k = torch.randn(2, 3, s, 4, requires_grad=True)
        v = torch.randn(2, 3, s, 6, requires_grad=True)
        ours = at.scaled_dot_product_attention(q, k, v)
        theirs = sdpa(q, k, v)
        assert ours.shape == theirs.shape == (2, 3, l, 6)
        assert torch.equal(ours, torch.nan_to_num(theirs))
        ours.sum().backward()
        assert q.grad.shape == q.shape and not q.grad.any()


def test_drop_in_refuses_constant_options_with_grad(torch):
    import attn.torch as at

    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(attn.UnsupportedError, match="alibi_slopes"):
        at.scaled_dot_product_attention(q, q, q, alibi_slopes=torch.ones(2, requires_grad=True))
