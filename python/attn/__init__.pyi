# Type stubs of the attn package.  Shapes as in include/attn.h:
#   layout "BLHD" (attn's, the default): q [B, L, Hq, D]  k [B, S, Hkv, D]
#     v [B, S, Hkv, Dv]  out [B, L, Hq, Dv]
#   layout "BHLD" (torch's):              q [B, Hq, L, D]  k [B, Hkv, S, D]
#     v [B, Hkv, S, Dv]  out [B, Hq, L, Dv]
#   weights [B, Hq, L, S] (heads before positions!)  lse [B, Hq, L]   both layouts
import os
from typing import Any, Callable, Dict, Literal, Optional, Sequence, Tuple, TypedDict, Union, overload

import numpy as np
import numpy.typing as npt
from typing_extensions import Unpack

# numpy.ndarray, torch.Tensor (CPU), or anything with the buffer protocol,
# __array_interface__ or __dlpack__; float32, float16 or bfloat16.
ArrayLike = Any
Causal = Union[bool, Literal["top-left", "lower-right"]]
Layout = Literal["BLHD", "BHLD"]
Kernel = Literal["auto", "ref", "flash"]
Align = Literal["top-left", "lower-right"]
Precision = Literal["exact", "fast"]

# The options every attention call takes (attn.sdpa, sdpa_backward, trace,
# paths, mha_forward, mha_backward): libattn's table of attn_sdpa_options
# (attn_sdpa_option), one keyword per option, in the table's order;
# tests/python/test_options.py holds this list to the table.
class AttentionOptions(TypedDict, total=False):
    causal: Causal  # True (at align's alignment) or an alignment's name
    align: Optional[Align]  # None: as causal says, else top-left
    window: Optional[Tuple[Optional[int], Optional[int]]]  # (left, right), -1/None = unbounded
    scale: Optional[float]  # > 0, default 1/sqrt(D)
    key_lengths: Optional[Union[ArrayLike, Sequence[int]]]  # [B]
    query_start: int  # where q's row 0 sits in a longer sequence
    key_start: int  # where k's row 0 sits
    total_len_q: int  # that sequence's lengths; 0 = this call's L
    total_len_kv: int  # ... and S
    mask: Optional[ArrayLike]  # bool [L, S] .. [B, Hq, L, S], True = may attend
    bias: Optional[ArrayLike]  # float [L, S] .. [B, Hq, L, S], added; -inf hides
    softcap: Optional[float]  # > 0: cap * tanh(s / cap) on the scaled scores
    alibi: Union[None, bool, ArrayLike]  # True: the paper's slopes; or [Hq] slopes
    sinks: Optional[ArrayLike]  # [Hq] sink logits (-inf: none)
    kernel: Kernel
    threads: Optional[int]
    precision: Precision  # fast: native bfloat16 dot products where the CPU has them

__version__: str

class Error(Exception):
    status: int
    status_name: str

class ArgumentError(Error, ValueError): ...
class ShapeError(Error, ValueError): ...
class SizeOverflowError(Error, OverflowError): ...
class OutOfMemoryError(Error, MemoryError): ...
class FileError(Error, OSError): ...
class FormatError(Error, ValueError): ...
class UnsupportedError(Error, NotImplementedError): ...
class NonFiniteError(Error, ValueError): ...
class InternalError(Error, RuntimeError): ...
class WaitTimeoutError(Error, TimeoutError): ...
class BudgetError(Error, ValueError): ...
class LayoutWarning(UserWarning): ...  # q, k read as [B, L, H, D] look like [B, H, L, D]

@overload
def sdpa(
    q: ArrayLike,  # [B, L, Hq, D] | [B, Hq, L, D] (layout), or [L, H, D] / [H, L, D], [L, D]
    k: ArrayLike,  # [B, S, Hkv, D] | [B, Hkv, S, D]
    v: ArrayLike,  # [B, S, Hkv, Dv] | [B, Hkv, S, Dv]
    *,
    layout: Optional[Layout] = ...,  # None: "BLHD", warning when q and k look like "BHLD"
    return_weights: Literal[False] = ...,
    return_lse: Literal[False] = ...,
    out: Optional[ArrayLike] = ...,  # [B, L, Hq, Dv] | [B, Hq, L, Dv], written
    **options: Unpack[AttentionOptions],
) -> Any: ...  # out, q's kind (numpy or torch) and dtype
@overload
def sdpa(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    layout: Optional[Layout] = ...,  # None: "BLHD", warning when q and k look like "BHLD"
    return_weights: bool = ...,
    return_lse: bool = ...,
    out: Optional[ArrayLike] = ...,
    **options: Unpack[AttentionOptions],
) -> Tuple[Any, ...]: ...  # (out, weights [B, Hq, L, S]?, lse [B, Hq, L]?), float32 extras
def sdpa_backward(
    q: ArrayLike,  # the forward's inputs, in layout
    k: ArrayLike,
    v: ArrayLike,
    dout: ArrayLike,  # dLoss/dout, out's shape
    *,
    out: Optional[ArrayLike] = ...,  # the forward's out and lse (both or neither)
    lse: Optional[ArrayLike] = ...,  # [B, Hq, L] float32
    layout: Optional[Layout] = ...,  # None: "BLHD", warning when q and k look like "BHLD"
    **options: Unpack[AttentionOptions],
) -> Tuple[Any, ...]: ...  # (dq like q, dk like k, dv like v), and dsinks [Hq] float32 with sinks
def trace(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    layout: Optional[Layout] = ...,  # None: "BLHD", warning when q and k look like "BHLD"
    **options: Unpack[AttentionOptions],
) -> Dict[str, npt.NDArray[np.float32]]: ...
# hook_q [B, L, Hq, D], hook_k [B, S, Hkv, D], hook_v [B, S, Hkv, Dv],
# hook_attn_scores and hook_pattern [B, Hq, L, S], hook_z [B, L, Hq, Dv]
def paths(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    q_changed: Optional[ArrayLike] = ...,  # the base's shapes; None = the base tensor
    k_changed: Optional[ArrayLike] = ...,
    v_changed: Optional[ArrayLike] = ...,
    layout: Optional[Layout] = ...,  # None: "BLHD", warning when q and k look like "BHLD"
    **options: Unpack[AttentionOptions],
) -> Dict[str, Any]: ...  # "base", "K only", "V only", "both", "changed": hooks; "interaction_z" [B, L, Hq, Dv]
def nullspace(
    weights: ArrayLike,  # [S] float32, a row of hook_pattern
    values: ArrayLike,  # [S, width] float32
    *,
    tolerance: float,
    visible: Optional[ArrayLike] = ...,  # [S] bool
    exact_limit: int = ...,
    starts: int = ...,
    allow_slow: bool = ...,
) -> Tuple[npt.NDArray[np.float64], Dict[str, Any]]: ...  # (moved [S], l1/max_output_change/exact/visible/programs)
def value_weighted_norms(
    pattern: ArrayLike,  # [n_heads, L, S] float32, a layer's hook_pattern
    v: ArrayLike,  # [S, n_kv_heads, d_head], its hook_v
    W_O: Optional[ArrayLike] = ...,  # [n_heads, d_head, d_model]; None: ||alpha v||
    *,
    reference: bool = ...,
) -> npt.NDArray[np.float32]: ...  # [n_heads, L, S]
def attention_rollout(
    patterns: ArrayLike,  # [n_layers, n_heads, L, L]
    *,
    head: Optional[int] = ...,  # None: the heads' mean
    residual: float = ...,
) -> npt.NDArray[np.float64]: ...  # [n_layers, L, L]
def attention_flow(
    patterns: ArrayLike,  # [n_layers, n_heads, L, L]
    position: int = ...,
    *,
    head: Optional[int] = ...,
    residual: float = ...,
) -> npt.NDArray[np.float64]: ...  # [L]
def mha_forward(
    x: ArrayLike,  # [B, L, d_model] or [L, d_model], float32 C-contiguous
    wq: ArrayLike,  # [d_model, Hq*D]
    wk: ArrayLike,  # [d_context, Hkv*D]
    wv: ArrayLike,  # [d_context, Hkv*Dv]
    *,
    heads: int,
    kv_heads: Optional[int] = ...,
    wo: Optional[ArrayLike] = ...,  # [Hq*Dv, d_out]
    bq: Optional[ArrayLike] = ...,
    bk: Optional[ArrayLike] = ...,
    bv: Optional[ArrayLike] = ...,
    bo: Optional[ArrayLike] = ...,
    context: Optional[ArrayLike] = ...,  # [B, S, d_context]
    return_weights: bool = ...,
    return_lse: bool = ...,
    **options: Unpack[AttentionOptions],
) -> Any: ...  # out [B, L, d_out], or a tuple with weights / lse
def mha_backward(
    x: ArrayLike,
    dout: ArrayLike,  # [B, L, d_out]
    wq: ArrayLike,
    wk: ArrayLike,
    wv: ArrayLike,
    *,
    heads: int,
    kv_heads: Optional[int] = ...,
    wo: Optional[ArrayLike] = ...,
    bq: Optional[ArrayLike] = ...,
    bk: Optional[ArrayLike] = ...,
    bv: Optional[ArrayLike] = ...,
    bo: Optional[ArrayLike] = ...,
    context: Optional[ArrayLike] = ...,
    **options: Unpack[AttentionOptions],
) -> Dict[str, Any]: ...  # dx, dwq, dwk, dwv, dbq, dbk, dbv (+ dcontext, dwo, dbo)
def pictures_available() -> bool: ...
def heatmap(
    path: Union[str, "os.PathLike[str]"],
    weights: ArrayLike,  # [H, L, S] or [L, S] float32
    *,
    query_labels: Optional[Sequence[str]] = ...,
    key_labels: Optional[Sequence[str]] = ...,
    visible: Optional[ArrayLike] = ...,
    head_ids: Optional[Sequence[int]] = ...,
    title: Optional[str] = ...,
    lang: str = ...,
    vmin: float = ...,
    vmax: float = ...,
    values: Optional[bool] = ...,
    columns: int = ...,
    cell: float = ...,
) -> str: ...

def report(
    path: Union[str, "os.PathLike[str]"],
    weights: ArrayLike,  # [L, S], [H, L, S] or [layers, H, L, S] float32
    *,
    visible: Optional[ArrayLike] = ...,  # bool, broadcastable to weights
    query_labels: Optional[Sequence[str]] = ...,  # [L]
    key_labels: Optional[Sequence[str]] = ...,  # [S]
    head_ids: Optional[Sequence[int]] = ...,  # [H]
    layer_ids: Optional[Sequence[int]] = ...,  # [layers]
    title: Optional[str] = ...,
    subtitle: Optional[str] = ...,
    paths: Optional[Dict[str, Any]] = ...,  # what attn.paths returns (one layer of weights)
    paths_batch: int = ...,
    line: Optional[ArrayLike] = ...,  # [n] finite floats
    line_labels: Optional[Sequence[str]] = ...,  # [n]
    line_title: Optional[str] = ...,
) -> str: ...

# attn.Model: a GGUF decoder (attn_decoder.h).  L tokens, N layers, d d_model,
# Hq query heads, V vocabulary.
class ModelOutput:
    ids: npt.NDArray[np.int32]  # [L]
    logits: npt.NDArray[np.float32]  # [L, V] or [1, V] (last_only)
    hidden: Optional[npt.NDArray[np.float32]]  # [N + 1, L, d]
    attention: Dict[int, npt.NDArray[np.float32]]  # layer -> [Hq, L, L]

Tokens = Union[str, bytes, Sequence[int], npt.NDArray[np.integer]]

class Model:
    path: str
    config: Dict[str, Any]
    def __init__(self, path: Union[str, "os.PathLike[str]"], *, weights: Literal["stored", "f32"] = ...,
                 precision: Literal["exact", "fast"] = ...) -> None: ...
    def tokenize(self, text: Union[str, bytes], *, split_special: bool = ...,
                 add_bos: Optional[bool] = ...) -> npt.NDArray[np.int32]: ...
    def detokenize(self, ids: Union[Sequence[int], npt.NDArray[np.integer]], *, skip_special: bool = ...,
                   errors: str = ...) -> str: ...
    def token_piece(self, token_id: int) -> str: ...
    padding_side: Literal["left", "right"]
    @property
    def cfg(self) -> "HookedConfig": ...  # TransformerLens's config object
    # TransformerLens's weights, float32, read from the GGUF and dequantized on each access
    W_E: npt.NDArray[np.float32]  # [d_vocab, d_model]
    W_U: npt.NDArray[np.float32]  # [d_model, d_vocab]
    b_U: npt.NDArray[np.float32]  # [d_vocab] (0)
    W_Q: npt.NDArray[np.float32]  # [n_layers, n_heads, d_model, d_head]
    W_K: npt.NDArray[np.float32]  # [n_layers, n_key_value_heads, d_model, d_head]
    W_V: npt.NDArray[np.float32]  # [n_layers, n_key_value_heads, d_model, d_head]
    W_O: npt.NDArray[np.float32]  # [n_layers, n_heads, d_head, d_model]
    b_Q: npt.NDArray[np.float32]  # [n_layers, n_heads, d_head]
    b_K: npt.NDArray[np.float32]  # [n_layers, n_key_value_heads, d_head]
    b_V: npt.NDArray[np.float32]
    b_O: npt.NDArray[np.float32]  # [n_layers, d_model] (0)
    W_in: npt.NDArray[np.float32]  # [n_layers, d_model, d_mlp]
    W_gate: npt.NDArray[np.float32]  # [n_layers, d_model, d_mlp]
    W_out: npt.NDArray[np.float32]  # [n_layers, d_mlp, d_model]
    ln1_w: npt.NDArray[np.float32]  # [n_layers, d_model]
    ln2_w: npt.NDArray[np.float32]  # [n_layers, d_model]
    ln_final_w: npt.NDArray[np.float32]  # [d_model]
    def piece_text(self, token_id: int) -> str: ...  # the piece as readable text ("苹果", " the")
    def to_str_tokens(self, input: Any, prepend_bos: Optional[bool] = ...) -> Any: ...  # list[str], or a list per sequence
    def to_tokens(self, input: Union[str, Sequence[str]], prepend_bos: Optional[bool] = ...,
                  padding_side: Optional[str] = ...) -> npt.NDArray[np.int32]: ...  # [B, L], padded
    def to_string(self, tokens: Any) -> Union[str, list[str]]: ...
    def to_single_token(self, string: str) -> int: ...
    def find_token(self, piece: Union[str, bytes]) -> int: ...  # a piece, or normal text ("公司")
    def forward(self, tokens: Tokens, *, hidden: bool = ..., attention: Union[bool, int, Sequence[int]] = ...,
                last_only: bool = ..., kernel: Kernel = ...) -> ModelOutput: ...
    def __call__(self, tokens: Tokens, *, hidden: bool = ..., attention: Union[bool, int, Sequence[int]] = ...,
                 last_only: bool = ..., kernel: Kernel = ...) -> ModelOutput: ...
    def hook_names(self) -> list[str]: ...
    def value_weighted_norms(self, input: Any, layer: int, *, use_W_O: bool = ...,
                             prepend_bos: Optional[bool] = ...) -> npt.NDArray[np.float32]: ...  # [n_heads, L, L]
    def attention_rollout(self, input: Any, *, head: Optional[int] = ..., residual: float = ...,
                          prepend_bos: Optional[bool] = ...) -> npt.NDArray[np.float64]: ...  # [n_layers, L, L]
    def attention_flow(self, input: Any, position: int = ..., *, head: Optional[int] = ..., residual: float = ...,
                       prepend_bos: Optional[bool] = ...) -> npt.NDArray[np.float64]: ...  # [L]
    def logit_lens(self, input: Any, position: int = ..., *,
                   prepend_bos: Optional[bool] = ...) -> npt.NDArray[np.float32]: ...  # [n_layers + 1, vocab]
    def logit_attribution(self, input: Any, token: Union[int, str], wrong: Union[int, str, None] = ...,
                          position: int = ..., *,
                          prepend_bos: Optional[bool] = ...) -> Dict[str, Any]: ...  # embed, attn [N], mlp [N], heads [N, Hq]
    def attribution_patching(self, clean: Any, corrupted: Any, metric: Optional[Callable[[Any], Any]] = ..., *,
                             names_filter: Any = ..., positions: Optional[Sequence[int]] = ...,
                             prepend_bos: Optional[bool] = ...) -> Dict[str, npt.NDArray[np.float64]]: ...
    def run_with_cache(self, input: Any, *, names_filter: Any = ..., fwd_hooks: Sequence[Tuple[Any, Any]] = ...,
                       return_type: Optional[str] = ..., remove_batch_dim: bool = ...,
                       incl_bwd: bool = ..., metric: Optional[Callable[[Any], Any]] = ...,
                       prepend_bos: Optional[bool] = ..., padding_side: Optional[str] = ...,
                       attention_mask: Any = ..., kernel: Kernel = ...) -> Tuple[Any, "ActivationCache"]: ...
    def run_with_hooks(self, input: Any, *, fwd_hooks: Sequence[Tuple[Any, Any]] = ...,
                       bwd_hooks: Sequence[Tuple[Any, Any]] = ..., metric: Optional[Callable[[Any], Any]] = ...,
                       return_type: Optional[str] = ..., last_only: bool = ..., prepend_bos: Optional[bool] = ...,
                       padding_side: Optional[str] = ..., attention_mask: Any = ...,
                       kernel: Kernel = ...) -> Any: ...  # logits [B, L, V], loss, (logits, loss) or None
    def weights_not_explanation(self, input: Any, layer: int, *, position: int = ..., tolerance: float = ...,
                                exact_limit: int = ..., starts: int = ...) -> list[Dict[str, Any]]: ...
    def top(self, logits: ArrayLike, k: int = ...) -> list[Tuple[int, str, float]]: ...
    def session(self, capacity: int = ..., *, kv_dtype: str = ..., kernel: Kernel = ...) -> "Session": ...
    def end_ids(self) -> Tuple[int, ...]: ...
    def generate(self, prompt: Tokens, *, max_tokens: int = ..., temperature: float = ..., top_k: int = ...,
                 top_p: float = ..., seed: int = ..., stop_at_eos: bool = ..., kv_dtype: str = ...,
                 stream: bool = ...) -> Any: ...  # int32 [n], or an iterator of ids with stream=True

class HookedConfig:
    n_layers: int
    d_model: int
    n_heads: int
    n_key_value_heads: int
    d_head: int
    d_mlp: int
    d_vocab: int
    act_fn: str
    normalization_type: str
    eps: float
    def __getattr__(self, name: str) -> Any: ...
    def __getitem__(self, name: str) -> Any: ...

class ActivationCache(Dict[str, Any]):
    model: Model
    has_batch_dim: bool
    def __getitem__(self, key: Union[str, Tuple[Any, ...]]) -> Any: ...  # "blocks.0.attn.hook_pattern" or ("pattern", 0)
    def remove_batch_dim(self) -> "ActivationCache": ...
    def to(self, target: Any) -> "ActivationCache": ...  # torch, "torch", a device, "numpy"
    def stack_activation(self, activation_name: str, layer: int = ..., sublayer_type: Optional[str] = ...) -> Any: ...
    def accumulated_resid(self, layer: Optional[int] = ..., incl_mid: bool = ..., apply_ln: bool = ...,
                          pos_slice: Any = ..., mlp_input: bool = ..., return_labels: bool = ...) -> Any: ...
    def decompose_resid(self, layer: Optional[int] = ..., mlp_input: bool = ..., mode: str = ...,
                        apply_ln: bool = ..., pos_slice: Any = ..., incl_embeds: bool = ...,
                        return_labels: bool = ...) -> Any: ...
    def apply_ln_to_stack(self, residual_stack: Any, layer: Optional[int] = ..., mlp_input: bool = ...,
                          pos_slice: Any = ..., batch_slice: Any = ..., has_batch_dim: bool = ...) -> Any: ...
    def logit_attrs(self, residual_stack: Any, tokens: Any, incorrect_tokens: Any = ..., pos_slice: Any = ...,
                    batch_slice: Any = ..., has_batch_dim: bool = ...) -> Any: ...
    def stack_head_results(self, layer: int = ..., return_labels: bool = ..., incl_remainder: bool = ...,
                           pos_slice: Any = ..., apply_ln: bool = ...) -> Any: ...  # [n_layers * n_heads, ...]
    def value_weighted_norms(self, layer: int, use_W_O: bool = ...) -> Any: ...  # [(batch,) n_heads, L, L]
    def attention_rollout(self, head: Optional[int] = ..., residual: float = ...) -> Any: ...  # [(batch,) N, L, L]
    def attention_flow(self, position: int = ..., head: Optional[int] = ..., residual: float = ...) -> Any: ...  # [(batch,) L]

def get_act_name(name: str, layer: Optional[int] = ..., layer_type: Optional[str] = ...) -> str: ...

class HookPoint(Tuple[str]):
    name: str

class Session:
    model: Model
    position: int
    capacity: int
    def __init__(self, model: Model, capacity: int, kv_dtype: str = ..., kernel: Kernel = ...) -> None: ...
    def step(self, tokens: Tokens, *, fwd_hooks: Sequence[Tuple[Any, Any]] = ...,
             names_filter: Any = ...) -> Any: ...  # logits [V] of the last token; (logits, cache) with names_filter
    def reset(self) -> None: ...
