"""Arrays in, zero copies: numpy arrays and torch tensors as views libattn reads.

Every tensor argument becomes a numpy view of the caller's memory (a
torch CPU tensor through ``Tensor.numpy()``, an object with the buffer
protocol, ``__array_interface__`` or ``__dlpack__`` through numpy), then a
4-D ``[B, L, H, D]`` view of it: a transpose for the ``[B, H, L, D]``
layout, new axes for the 2-D and 3-D shorthands.  None of these copies;
what libattn cannot express (a last axis that is not contiguous, a
negative stride) is refused with a message naming the argument, never
copied behind the caller's back.  Masks, biases and key lengths are the
exception: libattn reads them C-contiguous, so a non-contiguous one is
copied (docs/python.md).
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import numpy as np

from . import _core

_DTYPE_CODES = {"float32": _core.F32, "float16": _core.F16, "bfloat16": _core.BF16}
# numpy's dtype.name is a slow Python property: the common dtypes by object.
_NATIVE = {np.dtype(np.float32): (_core.F32, "float32"), np.dtype(np.float16): (_core.F16, "float16")}
_LAYOUTS = ("BLHD", "BHLD")


def _is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


class Array(NamedTuple):
    """A caller's array as a numpy view plus what attn needs to know of it."""

    view: np.ndarray  # the caller's memory (bfloat16 as a uint16 view)
    code: int  # attn_dtype code
    dtype_name: str  # "float32", "float16", "bfloat16"
    torch: bool  # the caller passed a torch tensor
    numpy_dtype: Any = None  # the caller's numpy dtype where the view's differs (bfloat16)


def _describe(x: Any) -> str:
    return type(x).__module__ + "." + type(x).__qualname__


def as_array(x: Any, name: str) -> Array:
    """The caller's array ``x`` (argument ``name``) as a zero-copy numpy view."""
    if x is None:
        raise TypeError(f"{name} is None: expected an array (numpy.ndarray or torch.Tensor)")
    if _is_torch(x):
        import torch

        if x.device.type != "cpu":
            raise TypeError(
                f"{name} is on device '{x.device}': attn computes on the CPU; "
                f"pass {name}.cpu() (a copy)"
            )
        if x.layout != torch.strided:
            raise TypeError(f"{name} has layout {x.layout}: attn reads strided (dense) tensors")
        t = x.detach()
        if t.dtype == torch.bfloat16:
            return Array(t.view(torch.int16).numpy().view(np.uint16), _core.BF16, "bfloat16", True)
        if t.dtype in (torch.float32, torch.float16):
            a = t.numpy()
            code, dtype_name = _NATIVE[a.dtype]
            return Array(a, code, dtype_name, True)
        raise TypeError(
            f"{name} has dtype {t.dtype}: attn computes float32, float16 and bfloat16 "
            f"tensors; convert with {name}.float()"
        )
    if isinstance(x, np.ndarray):
        a = x
        known = _NATIVE.get(a.dtype)
        if known is not None:
            return Array(a, known[0], known[1], False)
    elif isinstance(x, (list, tuple, int, float, complex, str, bytes)):
        raise TypeError(
            f"{name} is a {type(x).__name__}: expected an array (numpy.ndarray, torch.Tensor, "
            f"or an object with the buffer protocol, __array_interface__ or __dlpack__); "
            f"attn does not copy Python sequences into arrays, use numpy.asarray({name}, "
            f"dtype=numpy.float32)"
        )
    elif hasattr(x, "__array_interface__") or hasattr(x, "__array_struct__"):
        a = np.asarray(x)
    elif hasattr(x, "__dlpack__"):
        a = np.from_dlpack(x)
    else:
        try:
            a = np.asarray(memoryview(x))
        except TypeError:
            raise TypeError(
                f"{name} is a {_describe(x)}: expected an array (numpy.ndarray, torch.Tensor, "
                f"or an object with the buffer protocol, __array_interface__ or __dlpack__)"
            ) from None
    dt = a.dtype
    if dt.name in _DTYPE_CODES and dt.isnative:
        if dt.name == "bfloat16":  # ml_dtypes' numpy bfloat16
            return Array(a.view(np.uint16), _core.BF16, "bfloat16", False, dt)
        return Array(a, _DTYPE_CODES[dt.name], dt.name, False)
    hint = "" if dt.isnative else " in the machine's byte order"
    raise TypeError(
        f"{name} has dtype {dt}{'' if dt.isnative else ' (non-native byte order)'}: attn computes "
        f"float32, float16 and bfloat16{hint}; convert with {name}.astype(numpy.float32)"
    )


def check_layout(layout: str) -> str:
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be 'BLHD' ([B, L, H, D], attn's) or 'BHLD' ([B, H, L, D], torch's), got {layout!r}")
    return layout


def to_blhd(a: np.ndarray, name: str, layout: str) -> np.ndarray:
    """A 4-D [B, L, H, D] view of a 2-D, 3-D or 4-D array in ``layout``."""
    if a.ndim == 4:
        return a if layout == "BLHD" else a.transpose(0, 2, 1, 3)
    if a.ndim == 3:
        return a[None] if layout == "BLHD" else a[None].transpose(0, 2, 1, 3)
    if a.ndim == 2:
        return a[None, :, None, :]
    from ._core import ShapeError

    expected = "[B, L, H, D], [L, H, D] or [L, D]" if layout == "BLHD" else "[B, H, L, D], [H, L, D] or [L, D]"
    raise ShapeError(f"{name} has {a.ndim} dimensions {tuple(a.shape)}: expected {expected} (layout {layout})")


def squeeze_to(x: Any, ndim: int, layout: str) -> Any:
    """An output allocated 4-D, back in the rank the caller's q had."""
    if ndim == 4:
        return x
    if ndim == 3:
        return x[0]
    # 2-D [L, D]: [1, L, 1, W] or [1, 1, L, W]
    return x[0, :, 0] if layout == "BLHD" else x[0, 0]


def squeeze_rows(x: Any, ndim: int) -> Any:
    """weights [B, H, L, S] / lse [B, H, L] back to the rank of the caller's q."""
    if ndim == 4:
        return x
    if ndim == 3:
        return x[0]
    return x[0, 0]


def empty(shape: tuple[int, ...], like: Array) -> tuple[Any, np.ndarray]:
    """A new output array of ``like``'s kind (torch or numpy) and dtype:
    the object to return and the numpy view libattn writes."""
    if like.torch:
        import torch

        dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[like.dtype_name]
        t = torch.empty(shape, dtype=dtype)
        v = t.view(torch.int16).numpy().view(np.uint16) if dtype == torch.bfloat16 else t.numpy()
        return t, v
    if like.numpy_dtype is not None:  # ml_dtypes' bfloat16: its own dtype out, a uint16 view in
        a = np.empty(shape, dtype=like.numpy_dtype)
        return a, a.view(np.uint16)
    a = np.empty(shape, dtype=like.view.dtype)
    return a, a


def empty_f32(shape: tuple[int, ...], like: Array) -> tuple[Any, np.ndarray]:
    """A new float32 array (weights, lse) of ``like``'s kind."""
    if like.torch:
        import torch

        t = torch.empty(shape, dtype=torch.float32)
        return t, t.numpy()
    a = np.empty(shape, dtype=np.float32)
    return a, a


def _collapse_broadcast(a: np.ndarray) -> np.ndarray:
    """Axes of stride 0 (numpy broadcast_to, torch expand) as size 1: they
    hold one value, which libattn's size-1 broadcasting reads without a copy."""
    index = tuple(slice(0, 1) if (s == 0 and n > 1) else slice(None) for s, n in zip(a.strides, a.shape))
    return a[index]


def _as_4d(a: np.ndarray, name: str) -> np.ndarray:
    from ._core import ShapeError

    if a.ndim > 4:
        raise ShapeError(
            f"{name} has {a.ndim} dimensions {tuple(a.shape)}: expected [L, S], [H, L, S] or "
            f"[B, H, L, S] (size-1 axes broadcast)"
        )
    return a.reshape((1,) * (4 - a.ndim) + a.shape) if a.ndim < 4 else a


def _host_numpy(x: Any, name: str) -> np.ndarray:
    if x is None:
        raise TypeError(f"{name} is None")
    if _is_torch(x):
        if x.device.type != "cpu":
            raise TypeError(f"{name} is on device '{x.device}': attn computes on the CPU; pass {name}.cpu()")
        import torch

        t = x.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    if isinstance(x, np.ndarray):
        return x
    return np.asarray(x)


def mask_arg(m: Any, name: str = "mask") -> np.ndarray | None:
    """A boolean mask ([L, S] .. [B, H, L, S], nonzero = may attend) as the
    C-contiguous 4-D uint8 array libattn reads (a view when it can be)."""
    if m is None:
        return None
    a = _host_numpy(m, name)
    if a.dtype.kind == "f":
        raise TypeError(f"{name} has dtype {a.dtype}: a boolean mask (True = may attend) is bool or "
                        f"integer; an additive float mask is bias=")
    if a.dtype.kind not in "biu":
        raise TypeError(f"{name} has dtype {a.dtype}: expected bool (True = may attend) or an integer type")
    a = _collapse_broadcast(_as_4d(a, name))
    if a.dtype == np.bool_ or a.dtype == np.uint8 or a.dtype == np.int8:
        a = np.ascontiguousarray(a).view(np.uint8)
    else:
        a = np.ascontiguousarray(a != 0).view(np.uint8)
    return a


def bias_arg(x: Any, name: str = "bias") -> np.ndarray | None:
    """An additive score bias ([L, S] .. [B, H, L, S], -inf hides a key) as
    the C-contiguous 4-D float32 array libattn reads."""
    if x is None:
        return None
    a = _host_numpy(x, name)
    if a.dtype.kind != "f":
        raise TypeError(f"{name} has dtype {a.dtype}: an additive bias is a float array (a boolean mask is mask=)")
    a = _collapse_broadcast(_as_4d(a, name))
    return np.ascontiguousarray(a, dtype=np.float32)


def key_lengths_arg(x: Any, batch: int) -> np.ndarray | None:
    """Per-batch valid key counts as a C-contiguous int64 [B] array."""
    if x is None:
        return None
    a = _host_numpy(x, "key_lengths") if not isinstance(x, (list, tuple)) else np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"key_lengths has dtype {a.dtype}: expected integers, one per batch")
    from ._core import ShapeError

    if a.ndim != 1 or a.shape[0] != batch:
        raise ShapeError(f"key_lengths has shape {tuple(a.shape)}: expected [B] = [{batch}]")
    return np.ascontiguousarray(a, dtype=np.int64)
