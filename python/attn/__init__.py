"""attn: scaled dot-product attention from libattn, on numpy arrays and torch tensors.

    import attn
    out = attn.sdpa(q, k, v, causal=True, layout="BHLD")   # q [B, H, L, D], torch's layout
    out = attn.sdpa(q, k, v)                               # q [B, L, H, D], attn's layout

    import attn.torch
    attn.torch.scaled_dot_product_attention(query, key, value, is_causal=True)  # a drop-in

    m = attn.Model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")   # a real GGUF decoder
    out = m.forward("我吃了一个苹果", attention=True)            # logits, attention maps

Arrays are read where they are (zero copies, strides honoured); the GIL is
released while the kernel runs.  Every libattn status maps to a subclass of
attn.Error.  docs/python.md has the whole story.
"""

from __future__ import annotations

from . import _core
from ._core import (
    ArgumentError,
    BudgetError,
    Error,
    FileError,
    FormatError,
    InternalError,
    NonFiniteError,
    OutOfMemoryError,
    ShapeError,
    SizeOverflowError,
    UnsupportedError,
    WaitTimeoutError,
)
from ._analysis import attention_flow, attention_rollout, value_weighted_norms
from ._lens import ActivationCache, get_act_name
from ._model import HookPoint, Model, ModelOutput, Session
from ._module import mha_backward, mha_forward
from ._viz import Picture, heatmap, pictures_available, report
from ._sdpa import LayoutWarning, nullspace, paths, sdpa, sdpa_backward, trace

#: The version of libattn this package runs (attn_version()), which is the
#: package's version: both come from CMakeLists.txt's project() line.
__version__: str = _core.__version__


def _check_installed_version() -> None:
    """Refuses a package whose extension and installed metadata disagree
    (a stale attn._core beside newer Python files, e.g. after a partial
    upgrade): the numbers would come from a library the docs do not describe."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return
    try:
        installed = version("attn")
    except PackageNotFoundError:  # run from a build tree, not installed
        return
    if installed != __version__:
        raise ImportError(
            f"attn: the installed package is {installed} but its extension attn._core runs "
            f"libattn {__version__}: reinstall (pip install --force-reinstall .) so that both "
            f"come from one build"
        )


_check_installed_version()

__all__ = [
    "sdpa",
    "sdpa_backward",
    "trace",
    "paths",
    "nullspace",
    "value_weighted_norms",
    "attention_rollout",
    "attention_flow",
    "heatmap",
    "report",
    "pictures_available",
    "Picture",
    "Model",
    "ModelOutput",
    "Session",
    "HookPoint",
    "ActivationCache",
    "get_act_name",
    "mha_forward",
    "mha_backward",
    "Error",
    "ArgumentError",
    "ShapeError",
    "SizeOverflowError",
    "OutOfMemoryError",
    "FileError",
    "FormatError",
    "UnsupportedError",
    "NonFiniteError",
    "InternalError",
    "WaitTimeoutError",
    "BudgetError",
    "LayoutWarning",
    "__version__",
]


def __getattr__(name: str):
    # attn.torch imports torch, which takes seconds: only when asked for.
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'attn' has no attribute {name!r}")
