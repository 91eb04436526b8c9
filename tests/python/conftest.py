"""Shared pieces of the Python binding's tests (run by scripts/test-python.sh).

Tolerances come in pairs as in tests/support/tolerances.h: RTOL relative,
ATOL absolute for values near zero, both against float64 references.
"""

import numpy as np
import pytest

RTOL = 1e-5
ATOL = 1e-6


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def reference(q, k, v, *, causal=False, align="top-left", mask=None, bias=None, scale=None,
              key_lengths=None, window=None):
    """Attention in float64, in attn's layout: q [B, L, Hq, D], k [B, S, Hkv, D],
    v [B, S, Hkv, Dv] -> (out [B, L, Hq, Dv], weights [B, Hq, L, S], lse [B, Hq, L]).
    Written from docs/semantics.md, independent of the library."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, l, hq, d = q.shape
    s, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    kk = np.repeat(k, group, axis=2)
    vv = np.repeat(v, group, axis=2)
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    scores = np.einsum("blhd,bshd->bhls", q, kk) * scale
    visible = np.ones((b, hq, l, s), dtype=bool)
    offset = 0 if align == "top-left" else s - l
    i, j = np.arange(l)[:, None] + offset, np.arange(s)[None, :]
    if causal:
        visible &= j <= i
    if window is not None:
        left, right = window
        if left >= 0:
            visible &= j >= i - left
        if right >= 0:
            visible &= j <= i + right
    if key_lengths is not None:
        visible &= (np.arange(s)[None, None, None, :] < np.asarray(key_lengths)[:, None, None, None])
    if mask is not None:
        m = np.asarray(mask).astype(bool)
        visible &= np.broadcast_to(m.reshape((1,) * (4 - m.ndim) + m.shape), visible.shape)
    if bias is not None:
        bb = np.asarray(bias, dtype=np.float64)
        scores = scores + np.broadcast_to(bb.reshape((1,) * (4 - bb.ndim) + bb.shape), scores.shape)
        visible &= np.isfinite(scores) | (scores > 0)
    scores = np.where(visible, scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.where(visible, np.exp(scores - top), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    weights = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] > 0, np.log(np.where(total[..., 0] > 0, total[..., 0], 1.0)) + top[..., 0], -np.inf)
    out = np.einsum("bhls,bshd->blhd", weights, vv)
    return out, weights, lse


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def torch():
    try:
        import torch as t
    except ImportError:
        pytest.skip("torch is not installed: the tests against PyTorch skip "
                    "(scripts/test-python.sh installs it unless ATTN_PY_TORCH=0)")
    return t


@pytest.fixture
def plain_build_only():
    """Skips a test that only repeats, on a real model and at length, what
    others already run under the sanitizers (scripts/test-python.sh sets
    ATTN_PY_UNDER_SANITIZERS=1 for its ASan+UBSan pass): the whole test still
    runs in the plain pass before it."""
    import os

    if os.environ.get("ATTN_PY_UNDER_SANITIZERS") == "1":
        pytest.skip("a long real-model run: the plain pass ran it; the sanitizer pass covers the same code "
                    "on the tiny models")


@pytest.fixture(scope="module")
def transformers(torch):
    """transformers, for the tests against its own modules; they skip, saying
    so, where it is not installed."""
    try:
        import transformers as tr
    except ImportError:
        pytest.skip("transformers is not installed (scripts/test-python.sh installs it with torch)")
    return tr


def close_to_largest(ours, theirs, what, rel):
    """ours within rel of the reference's largest magnitude, same shape (the
    rule tests/model/test_safetensors_models.c uses for these checkpoints)."""
    ours, theirs = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape}, the reference's {theirs.shape}"
    scale = max(np.abs(theirs).max(), 1e-30)
    err = np.abs(ours - theirs).max()
    assert err <= rel * scale, f"{what}: off by {err:.3g} (largest {scale:.3g})"
