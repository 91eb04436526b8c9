"""The attention options of attn.sdpa, attn.sdpa_backward, attn.trace,
attn.paths, attn.mha_forward and attn.mha_backward.

libattn's table of attn_sdpa_options (``_core.sdpa_options()``, the C
function attn_sdpa_option) is their one description: a row per option with
its keyword here, its default, its kind and (for a choice) its names.  The
keywords, their defaults, the functions' signatures and the checks below
come from it; ``attn/__init__.pyi`` lists the keywords once, in
AttentionOptions, and tests/python/test_options.py holds it to the table.

A keyword becomes _core's keyword of its row (the C field's name), its
value checked by the row's kind.  Two rows share a keyword in two places:
``causal`` (True, or the name of an alignment, which sets ``align`` too)
and ``alibi`` (True: the paper's slopes, alibi_standard; an array: the
slopes, alibi_slopes).
"""

from __future__ import annotations

import ast
import functools
import inspect
from typing import Any, Callable

import numpy as np

from . import _arrays, _core

TABLE: tuple = _core.sdpa_options()

#: Every option keyword with its default, in the table's order.
DEFAULTS: dict[str, Any] = {}
for _row in TABLE:
    if _row["python"] and _row["python"] not in DEFAULTS:
        DEFAULTS[_row["python"]] = ast.literal_eval(_row["python_default"])
del _row

_ROW = {row["name"]: row for row in TABLE}
_ALIGNS = _ROW["align"]["choices"]


def choices(field: str) -> tuple:
    """The names of a choice's values, in its enum's order ("auto", "ref", "flash")."""
    return _ROW[field]["choices"]


def _names(choices) -> str:
    quoted = [repr(c) for c in choices]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]


def _int(x: Any, name: str) -> int:
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise TypeError(f"{name} must be an integer, got {x!r}")
    return x.__index__()


def _head_floats(x: Any, name: str):
    """One float32 per query head, contiguous (the library checks the count
    against Hq and each value; a torch tensor is read through numpy)."""
    a = np.asarray(_arrays._host_numpy(x, name))
    if a.ndim != 1:
        raise _core.ShapeError(f"{name} has shape {tuple(a.shape)}: expected [Hq], one value per query head")
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name} has dtype {a.dtype}: expected floats")
    return np.ascontiguousarray(a, dtype=np.float32)


def _float(x: Any, row: dict, name: str) -> float:
    default = "(or None: off)" if row["default"] == "off" else f"(or None for {row['default']})"
    try:
        x = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a positive number {default}, got {x!r}") from None
    if not x > 0.0 or x == float("inf"):
        raise ValueError(f"{name} must be a positive finite number {default}, got {x!r}")
    return x


def _window(x: Any, name: str):
    try:
        left, right = x
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be (left, right) with -1 or None = unbounded, got {x!r}") from None
    return tuple(-1 if w is None else _int(w, name) for w in (left, right))


def _value(row: dict, x: Any, name: str, batch: int) -> Any:
    """A keyword's value as _core takes it for this row, by the row's kind."""
    kind = row["kind"]
    if kind == "choice":
        if x not in row["choices"]:
            raise ValueError(f"{name} must be {_names(row['choices'])}, got {x!r}")
        return x
    if kind == "float":
        return _float(x, row, name)
    if kind == "int":
        x = _int(x, name)
        if x < row["min"]:
            raise ValueError(f"{name} must be >= {row['min']:g} (or None for the default), got {x}")
        return x
    if kind == "position":
        x = _int(x, name)
        if x < 0:
            raise ValueError(f"{name} must be >= 0, got {x}")
        return x
    if kind == "window":
        return _window(x, name)
    if kind == "per_batch":
        return _arrays.key_lengths_arg(x, batch)
    if kind == "per_head":
        return _head_floats(x, name)
    if kind == "bool_table":
        return _arrays.mask_arg(x, name)
    if kind == "float_table":
        return _arrays.bias_arg(x, name)
    if kind == "switch":
        return bool(x)
    raise TypeError(f"{name}: an option of kind {kind} cannot be given from Python")


def _causal(causal: Any, align: Any) -> dict:
    """causal: False/None, True (at align's alignment, top-left by default)
    or an alignment's name; align: None or an alignment's name, which must
    not contradict causal's."""
    if align is not None and align not in _ALIGNS:
        raise ValueError(f"align must be {_names(_ALIGNS)} (or None: as causal says), got {align!r}")
    if causal is False or causal is None:
        return {"causal": False, "align": align or _ALIGNS[0]}
    if causal is True:
        return {"causal": True, "align": align or _ALIGNS[0]}
    if isinstance(causal, str) and causal in _ALIGNS:
        if align is not None and align != causal:
            raise ValueError(f"causal={causal!r} aligns the diagonal {causal}, and align={align!r} says "
                             f"otherwise: give one of them")
        return {"causal": True, "align": causal}
    raise ValueError(f"causal must be False, True, {_names(_ALIGNS)}, got {causal!r}")


def _alibi(alibi: Any) -> dict:
    if alibi is True:
        return {"alibi_standard": True}
    if alibi is None or alibi is False:
        return {}
    return {"alibi_slopes": _head_floats(alibi, "alibi")}


def core_options(function: str, batch: int, given: dict) -> dict:
    """The caller's option keywords (given; any other keyword refused as
    Python refuses one) as _core's keywords, checked."""
    for name in given:
        if name not in DEFAULTS:
            raise TypeError(f"{function}() got an unexpected keyword argument '{name}'")
    kw = {**DEFAULTS, **given}
    out = {**_causal(kw["causal"], kw["align"]), **_alibi(kw["alibi"])}
    for row in TABLE:
        name, field = row["python"], row["name"]
        if name is None or field in out or name in ("causal", "align", "alibi"):
            continue
        x = kw[name]
        if x is not None:
            out[field] = _value(row, x, name, batch)
    return out


def takes_options(function: Callable) -> Callable:
    """Gives a function that takes **options the signature that names them:
    its own parameters, then every option keyword with its default."""
    signature = inspect.signature(function)
    own = [p for p in signature.parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    options = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
               for name, default in DEFAULTS.items()]
    function.__signature__ = signature.replace(parameters=own + options)
    return function
