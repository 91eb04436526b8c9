"""Arrays in, zero copies; bad input gives a clear exception, never a crash."""

import threading

import numpy as np
import pytest

import attn
from conftest import ATOL, RTOL, rand, reference


def ptr(a):
    return a.__array_interface__["data"][0]


def test_the_library_reads_the_callers_memory(rng):
    q, k, v = rand(rng, 2, 5, 4, 8), rand(rng, 2, 6, 2, 8), rand(rng, 2, 6, 2, 3)
    out = np.full((2, 5, 4, 3), np.nan, np.float32)
    res, w, lse = attn.sdpa(q, k, v, out=out, return_weights=True, return_lse=True)
    seen = attn._core.last_pointers()
    assert res is out and not np.isnan(out).any()
    assert seen["q"] == ptr(q) and seen["k"] == ptr(k) and seen["v"] == ptr(v)
    assert seen["out"] == ptr(out) and seen["weights"] == ptr(w) and seen["lse"] == ptr(lse)


def test_a_transposed_view_is_not_copied(rng):
    base = rand(rng, 2, 4, 6, 8)  # [B, H, L, D] storage, read as [B, L, H, D]
    view = base.transpose(0, 2, 1, 3)
    assert not view.flags.c_contiguous
    out = attn.sdpa(view, view, view, causal=True)
    assert attn._core.last_pointers()["q"] == ptr(base)
    copy = np.ascontiguousarray(view)
    np.testing.assert_array_equal(out, attn.sdpa(copy, copy, copy, causal=True))


def test_strided_slices_equal_their_copies(rng):
    big = rand(rng, 3, 20, 6, 16)
    q = big[::2, 3:13, ::2, :8]   # every axis strided, last axis contiguous
    k = big[1:, ::3, 1::6, 8:]  # one kv head for q's three
    v = big[1:, ::3, 1::6, :5]
    out = attn.sdpa(q, k, v)
    assert attn._core.last_pointers()["q"] == ptr(q)
    ref = attn.sdpa(*(np.ascontiguousarray(x) for x in (q, k, v)))
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_allclose(out, reference(q, k, v)[0], rtol=RTOL, atol=ATOL)


def test_torch_tensors_are_not_copied(torch):
    q = torch.randn(2, 4, 6, 8)  # torch's layout
    out = torch.empty(2, 4, 6, 8)
    attn.sdpa(q, q, q, layout="BHLD", out=out)
    seen = attn._core.last_pointers()
    assert seen["q"] == q.data_ptr() and seen["out"] == out.data_ptr()
    t = q.transpose(1, 2)  # a strided view
    attn.sdpa(t, t, t)
    assert attn._core.last_pointers()["q"] == q.data_ptr()
    m = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    attn.sdpa(q, q, q, layout="BHLD", mask=m)
    assert attn._core.last_pointers()["mask"] == m.data_ptr()  # bool as uint8, no copy


def test_broadcast_masks_are_read_once(rng):
    q = rand(rng, 2, 5, 3, 4)
    row = rng.random(7) > 0.5
    row[0] = True
    k, v = rand(rng, 2, 7, 3, 4), rand(rng, 2, 7, 3, 4)
    expanded = np.broadcast_to(row, (2, 3, 5, 7))  # stride 0 on three axes
    out = attn.sdpa(q, k, v, mask=expanded)
    np.testing.assert_allclose(out, reference(q, k, v, mask=row)[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("bad,exc,words", [
    (lambda q: q.astype(np.float64), TypeError, "q has dtype float64"),
    (lambda q: q.astype(np.int32), TypeError, "q has dtype int32"),
    (lambda q: q[..., ::2], attn.ShapeError, "last axis"),
    (lambda q: q[:, ::-1], attn.ShapeError, "negative stride"),
    (lambda q: q[None], attn.ShapeError, "5 dimensions"),
    (lambda q: q[0, 0, 0], attn.ShapeError, "1 dimensions"),
    (lambda q: None, TypeError, "q is None"),
    (lambda q: q.tolist(), TypeError, "q is a list"),
    (lambda q: "q", TypeError, "q is a str"),
    (lambda q: object(), TypeError, "q is a builtins.object"),
    (lambda q: q.astype(">f4"), TypeError, "byte order"),
])
def test_bad_q(rng, bad, exc, words):
    q = rand(rng, 2, 4, 2, 8)
    with pytest.raises(exc, match=words):
        attn.sdpa(bad(q), q, q)


def test_bad_shapes_and_options(rng):
    q, k = rand(rng, 2, 4, 4, 8), rand(rng, 2, 5, 3, 8)
    with pytest.raises(attn.ShapeError, match="multiple") as e:
        attn.sdpa(q, k, k)  # 4 query heads, 3 kv heads
    assert e.value.status == -2 and e.value.status_name
    assert isinstance(e.value, ValueError) and isinstance(e.value, attn.Error)
    with pytest.raises(attn.ShapeError):
        attn.sdpa(q, q[:1], q[:1])  # batch
    with pytest.raises(attn.ShapeError):
        attn.sdpa(q, q, q, mask=np.ones((3, 4, 4), bool))
    with pytest.raises(attn.ShapeError, match="key_lengths"):
        attn.sdpa(q, q, q, key_lengths=[1, 2, 3])
    with pytest.raises(TypeError, match="bias"):
        attn.sdpa(q, q, q, mask=np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="causal"):
        attn.sdpa(q, q, q, causal="upper-left")
    with pytest.raises(ValueError, match="layout"):
        attn.sdpa(q, q, q, layout="LBHD")
    with pytest.raises(ValueError, match="scale"):
        attn.sdpa(q, q, q, scale=-1.0)
    with pytest.raises(ValueError, match="kernel"):
        attn.sdpa(q, q, q, kernel="fast")
    with pytest.raises(ValueError, match="threads"):
        attn.sdpa(q, q, q, threads=0)
    with pytest.raises(attn.ShapeError, match="out"):
        attn.sdpa(q, q, q, out=np.empty((2, 4, 4, 7), np.float32))
    with pytest.raises(ValueError, match="read-only"):
        ro = np.empty_like(q)
        ro.flags.writeable = False
        attn.sdpa(q, q, q, out=ro)
    with pytest.raises(attn.ArgumentError, match="both"):
        attn.sdpa_backward(q, q, q, q, out=q)


def test_every_status_has_a_class():
    names = {-1: attn.ArgumentError, -2: attn.ShapeError, -3: attn.SizeOverflowError,
             -4: attn.OutOfMemoryError, -5: attn.FileError, -6: attn.FormatError,
             -7: attn.UnsupportedError, -8: attn.NonFiniteError, -9: attn.InternalError,
             -10: attn.WaitTimeoutError, -11: attn.BudgetError}
    for status, cls in names.items():
        with pytest.raises(cls, match="the message") as e:
            attn._core.raise_for_status(status, "the message")
        assert e.value.status == status and isinstance(e.value, attn.Error)
    with pytest.raises(attn.Error):
        attn._core.raise_for_status(-99, "unknown")
    assert issubclass(attn.FileError, OSError) and issubclass(attn.OutOfMemoryError, MemoryError)


def test_threads_give_the_serial_answers(rng):
    problems = []
    for i in range(8):
        q, k, v = rand(rng, 2, 33 + i, 4, 16), rand(rng, 2, 40, 2, 16), rand(rng, 2, 40, 2, 16)
        problems.append((q, k, v, attn.sdpa(q, k, v, causal=i % 2 == 0)))
    results = [None] * len(problems)
    errors = []

    def work(i):
        try:
            q, k, v, _ = problems[i]
            for _ in range(5):
                out = attn.sdpa(q, k, v, causal=i % 2 == 0, threads=1)
                dq, _, _ = attn.sdpa_backward(q, k, v, out, causal=i % 2 == 0, threads=1)
            results[i] = out
            try:  # errors are per thread too
                attn.sdpa(q, k[:, :, :1, :3], v)
            except attn.ShapeError as e:
                assert "width" in str(e)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(problems))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (_, _, _, serial), out in zip(problems, results):
        np.testing.assert_array_equal(out, serial)  # bit-identical for any thread count


class _Interface:
    """An array known only by __array_interface__ (no buffer, not numpy)."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


class _DLPack:
    """An array known only by __dlpack__."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_array_interface_dlpack_and_buffers_are_not_copied(rng):
    q = rand(rng, 1, 4, 2, 8)
    ref = attn.sdpa(q, q, q)
    for wrap in (_Interface, _DLPack, memoryview):
        out = attn.sdpa(wrap(q), wrap(q), wrap(q))
        assert attn._core.last_pointers()["q"] == ptr(q), wrap
        np.testing.assert_array_equal(out, ref)


def test_other_devices_are_refused(torch):
    q = torch.empty(1, 4, 2, 8, device="meta")
    with pytest.raises(TypeError, match="device 'meta'.*CPU"):
        attn.sdpa(q, q, q)


def test_a_version_mismatch_is_refused_at_import(monkeypatch):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "99.0.0")
    with pytest.raises(ImportError, match="99.0.0.*reinstall"):
        attn._check_installed_version()


def _long_problem(rng):
    q = rand(rng, 1, 768, 4, 64)
    return q, q, q


def test_the_gil_is_released_during_a_call(rng):
    """Another Python thread runs while a kernel computes: with the GIL held
    it could not take a single step until the call returned."""
    q, k, v = _long_problem(rng)
    started = threading.Event()

    def call():
        started.set()
        attn.sdpa(q, k, v, threads=1)

    t = threading.Thread(target=call)
    t.start()
    started.wait()
    n = 0
    while t.is_alive():
        n += 1
    t.join()
    print(f"steps during the call: {n}")
    assert n > 1000, f"the main thread took only {n} steps during the call"


def test_ctrl_c_during_a_call_raises_when_it_returns(rng):
    import os
    import signal

    q, k, v = _long_problem(rng)
    timer = threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in range(200):  # until the signal lands during (or between) calls
                attn.sdpa(q, k, v, threads=1)
    finally:
        timer.cancel()
    np.testing.assert_array_equal(attn.sdpa(q[:, :8], k[:, :8], v[:, :8]),
                                  attn.sdpa(q[:, :8].copy(), k[:, :8].copy(), v[:, :8].copy()))
