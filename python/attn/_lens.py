"""TransformerLens's habits on attn.Model: the config object (cfg), hook
names by shorthand (get_act_name), name filters with globs, readable token
pieces, and ActivationCache with its residual-stream helpers.

Names, shapes and semantics follow TransformerLens 2.x for these decoders
(pre-norm RMSNorm, rotary positions, no positional embedding); what attn
cannot give yet is listed in docs/python.md's table and raises saying so.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _analysis

__all__ = ["HookedConfig", "ActivationCache", "get_act_name", "names_filter_predicate", "byte_level_spelling",
           "readable_piece"]


@dataclass(frozen=True)
class HookedConfig:
    """TransformerLens's HookedTransformerConfig fields for an attn.Model
    (model.cfg); model.config keeps the library's own dict."""

    model_name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_key_value_heads: int
    d_head: int
    d_mlp: int
    d_vocab: int
    d_vocab_out: int
    n_ctx: Optional[int]
    act_fn: str
    normalization_type: str
    positional_embedding_type: str
    rotary_base: float
    eps: float
    attn_scale: float
    window_size: Optional[int]
    default_prepend_bos: bool
    tokenizer_prepends_bos: bool
    original_architecture: str
    device: str = "cpu"
    dtype: str = "float32"

    @classmethod
    def from_config(cls, c: Dict[str, Any], path: str) -> "HookedConfig":
        import os

        act = {"swiglu": "silu", "geglu_tanh": "gelu_pytorch_tanh"}.get(c["activation"], c["activation"])
        return cls(
            model_name=os.path.basename(path), n_layers=c["n_layers"], d_model=c["d_model"], n_heads=c["n_heads"],
            n_key_value_heads=c["n_kv_heads"], d_head=c["head_dim"], d_mlp=c["d_ffn"], d_vocab=c["vocab"],
            d_vocab_out=c["vocab"], n_ctx=None, act_fn=act, normalization_type="RMS",
            positional_embedding_type="rotary", rotary_base=c["rope_theta"], eps=c["rms_eps"],
            attn_scale=(1.0 / c["attn_scale"]) if c["attn_scale"] else float(np.sqrt(c["head_dim"])),
            window_size=c["sliding_window"] or None, default_prepend_bos=bool(c["add_bos"]),
            tokenizer_prepends_bos=bool(c["add_bos"]), original_architecture=c["architecture"])

    def __getitem__(self, key: str) -> Any:  # cfg["n_layers"] as well as cfg.n_layers
        return getattr(self, key)


# TransformerLens's get_act_name aliases (utils.get_act_name).
_ALIASES = {"a": "attn", "m": "mlp", "b": "", "block": "", "blocks": "", "attention": "attn"}
_ATTN = {"q", "k", "v", "z", "rot_q", "rot_k", "pattern", "attn_scores", "result"}
_MLP = {"pre", "post", "pre_linear"}
# q_input .. v_input are the block's in TransformerLens (blocks.L.hook_q_input).
_BLOCK = {"resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "attn_in", "mlp_in", "q_input",
          "k_input", "v_input"}


def get_act_name(name: str, layer: Optional[int] = None, layer_type: Optional[str] = None) -> str:
    """A hook's full name from TransformerLens's shorthand:
    get_act_name("pattern", 3) == "blocks.3.attn.hook_pattern",
    ("resid_pre", 0), ("scale", 2, "ln1"), ("normalized") -> "ln_final.hook_normalized"."""
    if "." in name or name.startswith("hook_"):
        return name
    aliases = {"attn": "pattern", "scores": "attn_scores", "attn_logits": "attn_scores"}
    name = aliases.get(name, name)
    if name in ("embed", "pos_embed"):
        return f"hook_{name}"
    if layer_type is not None:
        layer_type = _ALIASES.get(layer_type, layer_type)
    if name in ("scale", "normalized"):
        if layer is None:
            return f"ln_final.hook_{name}"
        return f"blocks.{layer}.{layer_type or 'ln1'}.hook_{name}"
    if layer is None:
        raise ValueError(f"get_act_name({name!r}): this hook is per layer: give the layer")
    if name in _ATTN:
        return f"blocks.{layer}.attn.hook_{name}"
    if name in _MLP:
        return f"blocks.{layer}.mlp.hook_{name}"
    if name in _BLOCK:
        return f"blocks.{layer}.hook_{name}"
    raise ValueError(f"get_act_name: unknown activation {name!r}")


def _is_glob(text: str) -> bool:
    return any(ch in text for ch in "*?[")


def names_filter_predicate(names_filter: Any) -> Callable[[str], bool]:
    """None (every name), a name, a glob ("blocks.*.attn.hook_pattern", as
    the CLI's --hooks), a list of names and globs, or a predicate."""
    if names_filter is None:
        return lambda name: True
    if isinstance(names_filter, str):
        names_filter = [names_filter]
    elif callable(names_filter):
        return names_filter
    exact = {n for n in names_filter if not _is_glob(n)}
    globs = [n for n in names_filter if _is_glob(n)]
    for n in list(exact) + globs:
        if not isinstance(n, str):
            raise TypeError(f"names_filter: a name, a glob or a predicate, got {n!r}")
    return lambda name: name in exact or any(fnmatch.fnmatchcase(name, g) for g in globs)


# --------------------------------------------------------- readable pieces

def _byte_level_table() -> Dict[int, str]:
    """GPT-2's byte-level alphabet: each byte as the printable character a
    byte-level BPE vocabulary spells it with."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_TO_CHAR = _byte_level_table()
_TO_BYTE = {ch: b for b, ch in _TO_CHAR.items()}


def byte_level_spelling(text: Union[str, bytes]) -> str:
    """How a byte-level BPE vocabulary spells text: "公司" -> "åħ¬åı¸"."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return "".join(_TO_CHAR[b] for b in data)


def readable_piece(piece: str, tokenizer: Optional[str]) -> str:
    """A vocabulary piece as text: byte-level ("èĭ¹æŀľ" -> "苹果", "Ġthe" ->
    " the") or SentencePiece ("▁the" -> " the", "<0xE8>" -> a byte); bytes
    that do not complete a character print as \\xNN escapes."""
    if tokenizer == "bpe":
        if all(ch in _TO_BYTE for ch in piece):
            data = bytes(_TO_BYTE[ch] for ch in piece)
            return data.decode("utf-8", errors="backslashreplace")
        return piece  # a special or added token, spelled as text
    if tokenizer == "spm":
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            return bytes([int(piece[3:5], 16)]).decode("utf-8", errors="backslashreplace")
        return piece.replace("\u2581", " ")
    return piece


# ------------------------------------------------------------ the cache

class ActivationCache(dict):
    """TransformerLens's ActivationCache: a dict of activations by full hook
    name (numpy float32, batch axis first), with its shorthand indexing and
    residual-stream helpers.  model is the attn.Model that made it."""

    def __init__(self, cache: Dict[str, Any], model: Any, has_batch_dim: bool = True) -> None:
        super().__init__(cache)
        self.model = model
        self.has_batch_dim = has_batch_dim

    def __getitem__(self, key: Union[str, Tuple]) -> Any:
        if isinstance(key, tuple):
            key = get_act_name(*key)
        elif isinstance(key, str) and key not in self and "." not in key and not key.startswith("hook_"):
            key = get_act_name(key)
        try:
            return dict.__getitem__(self, key)
        except KeyError:
            raise KeyError(f"{key!r} is not in the cache (names_filter may have left it out; "
                           f"cache.keys() lists what is)") from None

    def __repr__(self) -> str:
        return f"ActivationCache with keys {list(self.keys())}"

    @property
    def _n_layers(self) -> int:
        return self.model.cfg.n_layers

    def remove_batch_dim(self) -> "ActivationCache":
        """Drops the batch axis of a batch of 1 (TransformerLens's remove_batch_dim)."""
        if not self.has_batch_dim:
            return self
        for key, value in self.items():
            if value.shape[0] != 1:
                raise ValueError(f"remove_batch_dim: {key} has a batch of {value.shape[0]}, not 1")
        return ActivationCache({k: v[0] for k, v in self.items()}, self.model, has_batch_dim=False)

    def to(self, target: Any) -> "ActivationCache":
        """A cache of torch tensors (cache.to(torch), cache.to("torch"), or
        a torch device such as "cpu"); numpy back with "numpy"."""
        name = getattr(target, "__name__", target)
        if name == "numpy":
            return ActivationCache({k: np.asarray(v) for k, v in self.items()}, self.model, self.has_batch_dim)
        import torch

        device = "cpu" if name == "torch" else target
        return ActivationCache({k: torch.as_tensor(np.asarray(v)).to(device) for k, v in self.items()},
                               self.model, self.has_batch_dim)

    def stack_activation(self, activation_name: str, layer: int = -1, sublayer_type: Optional[str] = None):
        """[n, ...] the activation of layers 0 .. layer - 1 (all with -1) stacked."""
        n = self._n_layers if layer == -1 else layer
        return np.stack([self[get_act_name(activation_name, l, sublayer_type)] for l in range(n)])

    def _resid_final(self):
        return self[f"blocks.{self._n_layers - 1}.hook_resid_post"]

    def accumulated_resid(self, layer: Optional[int] = None, incl_mid: bool = False, apply_ln: bool = False,
                          pos_slice: Any = None, mlp_input: bool = False, return_labels: bool = False):
        """The residual stream at the start of each layer up to ``layer``
        (None: all, plus the final resid_post), [n, (batch,) pos, d_model];
        incl_mid adds each resid_mid; labels "0_pre", "0_mid", ..., "final_post"."""
        n = self._n_layers if layer is None or layer == -1 else layer
        parts, labels = [], []
        for l in range(n + (1 if mlp_input and n < self._n_layers else 0)):
            if l < n:
                parts.append(self[f"blocks.{l}.hook_resid_pre"])
                labels.append(f"{l}_pre")
            if (incl_mid and l < n) or (mlp_input and l == n):
                parts.append(self[f"blocks.{l}.hook_resid_mid"])
                labels.append(f"{l}_mid")
        if layer is None or layer == -1 or layer == self._n_layers:
            parts.append(self._resid_final())
            labels.append("final_post")
        stack = np.stack(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input)
        stack = _slice_pos(stack, pos_slice, self.has_batch_dim)
        return (stack, labels) if return_labels else stack

    def decompose_resid(self, layer: Optional[int] = None, mlp_input: bool = False, mode: str = "all",
                        apply_ln: bool = False, pos_slice: Any = None, incl_embeds: bool = True,
                        return_labels: bool = False):
        """The residual stream at the start of ``layer`` (None: the final one)
        as the sum of its parts: the embeddings, then each earlier layer's
        attn_out and mlp_out (mode "attn" or "mlp" keeps one kind);
        [n, (batch,) pos, d_model].  Their sum is resid_pre[layer] (or
        resid_mid with mlp_input, or the final resid_post)."""
        if mode not in ("all", "attn", "mlp"):
            raise ValueError(f"mode must be 'all', 'attn' or 'mlp', got {mode!r}")
        n = self._n_layers if layer is None or layer == -1 else layer
        parts, labels = [], []
        if incl_embeds:
            parts.append(self["hook_embed"])
            labels.append("embed")
        for l in range(n + (1 if mlp_input and n < self._n_layers else 0)):
            if mode in ("all", "attn"):
                parts.append(self[f"blocks.{l}.hook_attn_out"])
                labels.append(f"{l}_attn_out")
            if mode in ("all", "mlp") and l < n:
                parts.append(self[f"blocks.{l}.hook_mlp_out"])
                labels.append(f"{l}_mlp_out")
        stack = np.stack(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input)
        stack = _slice_pos(stack, pos_slice, self.has_batch_dim)
        return (stack, labels) if return_labels else stack

    def _ln_scale(self, layer: Optional[int], mlp_input: bool):
        """The RMSNorm's scale sqrt(mean(x^2) + eps) [(batch,) pos, 1] at the
        input of ``layer``'s attention (ln1), MLP (ln2) or the final norm."""
        if layer is None or layer == -1 or layer == self._n_layers:
            name = "ln_final.hook_scale"
            x = self._resid_final()
        elif mlp_input:
            name = f"blocks.{layer}.ln2.hook_scale"
            x = self[f"blocks.{layer}.hook_resid_mid"]
        else:
            name = f"blocks.{layer}.ln1.hook_scale"
            x = self[f"blocks.{layer}.hook_resid_pre"]
        if name in self:
            return dict.__getitem__(self, name)
        x64 = np.asarray(x, dtype=np.float64)
        return np.sqrt((x64 * x64).mean(-1, keepdims=True) + self.model.cfg.eps)

    def apply_ln_to_stack(self, residual_stack, layer: Optional[int] = None, mlp_input: bool = False,
                          pos_slice: Any = None, batch_slice: Any = None, has_batch_dim: bool = True):
        """Each component divided by the norm's scale at that point (the
        scale of the whole stream, as TransformerLens does: the norm is then
        linear in the components, which add up to the normed stream before
        its weight).  RMSNorm: no centring."""
        scale = self._ln_scale(layer, mlp_input)
        if batch_slice is not None and self.has_batch_dim:
            scale = scale[batch_slice]
        if pos_slice is not None:
            scale = _slice_pos(scale[None], pos_slice, self.has_batch_dim)[0]
        if not has_batch_dim and self.has_batch_dim:
            scale = scale[0]
        return (np.asarray(residual_stack, dtype=np.float64) / scale).astype(np.float32)

    def stack_head_results(self, layer: int = -1, return_labels: bool = False, incl_remainder: bool = False,
                           pos_slice: Any = None, apply_ln: bool = False):
        """Each head's output after W_O (TransformerLens's hook_result),
        [n_layers * n_heads, (batch,) pos, d_model] for layers 0 .. layer - 1,
        labels "L0H0", ...; computed from hook_z and the model's W_O (GQA's
        z is per query head).  incl_remainder adds hook_attn_out minus their
        sum (0 where attn_out is the heads' sum: Qwen2; Gemma's
        post-attention norm makes it the norm's doing)."""
        n = self._n_layers if layer == -1 else layer
        W_O = self.model.W_O
        parts, labels = [], []
        for l in range(n):
            z = np.asarray(self[f"blocks.{l}.attn.hook_z"], dtype=np.float64)  # [(b,) pos, H, Dh]
            result = np.einsum("...hd,hdm->h...m", z, W_O[l].astype(np.float64))
            parts.append(result)
            labels += [f"L{l}H{h}" for h in range(result.shape[0])]
        stack = np.concatenate(parts)
        if incl_remainder:
            total = sum(np.asarray(self[f"blocks.{l}.hook_attn_out"], dtype=np.float64) for l in range(n))
            stack = np.concatenate([stack, (total - stack.sum(0))[None]])
            labels.append("remainder")
        stack = stack.astype(np.float32)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer if layer != -1 else None)
        stack = _slice_pos(stack, pos_slice, self.has_batch_dim)
        return (stack, labels) if return_labels else stack

    def _per_batch(self, compute):
        """compute() of the cache without a batch axis, stacked over the batch."""
        if not self.has_batch_dim:
            return compute(self)
        rows = next(iter(self.values())).shape[0]
        return np.stack([compute(ActivationCache({k: v[b] for k, v in self.items()}, self.model, False))
                         for b in range(rows)])

    def value_weighted_norms(self, layer: int, use_W_O: bool = True):
        """Kobayashi et al.'s ||alpha_ij v_j W_O^h|| of layer ``layer``,
        [(batch,) n_heads, L, L] (use_W_O False: ||alpha_ij v_j||), from its
        hook_pattern and hook_v and the model's W_O (attn.value_weighted_norms)."""
        W_O = self.model.W_O[layer] if use_W_O else None
        return self._per_batch(lambda c: _analysis.value_weighted_norms(
            c[f"blocks.{layer}.attn.hook_pattern"], c[f"blocks.{layer}.attn.hook_v"], W_O))

    def attention_rollout(self, head: Optional[int] = None, residual: float = 0.5):
        """Abnar & Zuidema's rollout over every layer's hook_pattern,
        [(batch,) n_layers, L, L] (attn.attention_rollout)."""
        return self._per_batch(lambda c: _analysis.attention_rollout(
            c.stack_activation("pattern"), head=head, residual=residual))

    def attention_flow(self, position: int = -1, head: Optional[int] = None, residual: float = 0.5):
        """Abnar & Zuidema's flow into ``position`` after the last layer,
        [(batch,) L] (attn.attention_flow)."""
        return self._per_batch(lambda c: _analysis.attention_flow(
            c.stack_activation("pattern"), position, head=head, residual=residual))

    def logit_attrs(self, residual_stack, tokens, incorrect_tokens=None, pos_slice: Any = None,
                    batch_slice: Any = None, has_batch_dim: bool = True):
        """Each component's contribution to the logit of tokens (minus that of
        incorrect_tokens): residual_stack [n, ..., d_model], already through
        apply_ln_to_stack, dotted with the final norm's weight times W_U's
        column of each token (TransformerLens's logit_attrs with the norm's
        weight folded into W_U).  tokens: an int or [batch] ids."""
        W_U, w = self.model.W_U, self.model.ln_final_w.astype(np.float64)
        ln = w if W_U.ndim == 2 else None

        def column(t):  # [d] or [d, batch], the norm's weight folded in
            c = W_U[:, np.asarray(t)].astype(np.float64)
            return c * (ln[:, None] if c.ndim == 2 else ln)

        direction = column(tokens)
        if incorrect_tokens is not None:
            direction = direction - column(incorrect_tokens)
        stack = np.asarray(residual_stack, dtype=np.float64)
        if direction.ndim == 1:
            return np.einsum("...d,d->...", stack, direction)
        # one token per batch row: stack [n, batch, d] (a position already chosen)
        return np.einsum("nbd,db->nb", stack, direction)


def _slice_pos(stack, pos_slice: Any, has_batch_dim: bool):
    """stack [n, (batch,) pos, ...] at positions pos_slice (an int keeps the axis)."""
    if pos_slice is None:
        return stack
    if isinstance(pos_slice, (int, np.integer)):
        pos_slice = [int(pos_slice)]
    axis = 2 if has_batch_dim else 1
    index = [slice(None)] * stack.ndim
    index[axis] = pos_slice
    return stack[tuple(index)]


# ------------------------------------------------------------- weights

class Weights:
    """TransformerLens's weight attributes of an attn.Model, read from the
    loaded model as its forward uses them (attn_decoder_weight: a GGUF file
    or a Hugging Face checkpoint alike), dequantized to float32 on each
    access (nothing is kept: W_E alone is 0.5 GB for Qwen2.5 0.5B).  Shapes
    as TransformerLens:

        W_E [d_vocab, d_model]              W_U [d_model, d_vocab], b_U [d_vocab] (0)
        W_Q [n_layers, n_heads, d_model, d_head]       b_Q [n_layers, n_heads, d_head]
        W_K, W_V [n_layers, n_key_value_heads, d_model, d_head]   (GQA: not repeated)
        W_O [n_layers, n_heads, d_head, d_model]       b_O [n_layers, d_model] (0)
        W_in, W_gate [n_layers, d_model, d_mlp]        W_out [n_layers, d_mlp, d_model]
        ln1_w, ln2_w [n_layers, d_model]    ln_final_w [d_model]  (the multiplier the
                                            forward uses: Gemma's 1 + w)
    """

    def __init__(self, model: Any) -> None:
        self._model = model

    def tensor(self, name: str, required: bool = True):
        """The weight named as GGUF names it ("blk.3.attn_q.weight"): a
        projection [d_out, d_in], a vector [n]; None (or KeyError when
        required) where the model has none."""
        from . import _core

        got = _core.model_weight(self._model._handle, name)
        if got is None:
            if required:
                raise KeyError(f"{name}: this {self._model.cfg.original_architecture} model has none")
            return None
        data, rows, cols = got
        values = np.frombuffer(data, dtype=np.float32)
        return values if cols == 1 and not name.endswith(_MATRICES) else values.reshape(rows, cols)

    def per_layer(self, name: str, shape: Tuple[int, ...], transpose: Tuple[int, ...], required: bool = True):
        layers = []
        for l in range(self._model.cfg.n_layers):
            t = self.tensor(f"blk.{l}.{name}", required)
            if t is None:
                return None
            layers.append(t.reshape(shape).transpose(transpose))
        return np.ascontiguousarray(np.stack(layers))


# The projections' names (a matrix even where one of its sides is 1).
_MATRICES = ("token_embd.weight", "output.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
             "attn_output.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")


# One layer's weight in TransformerLens's shape: (GGUF name, reshape, transpose)
# of the [d_out, d_in] projection or the vector; "heads" and "kv_heads" are
# filled from cfg.  None where the weight is 0 in these models (b_O).
_LAYER_WEIGHTS = {
    "W_Q": ("attn_q.weight", ("heads", "d_head", "d_model"), (0, 2, 1)),
    "W_K": ("attn_k.weight", ("kv_heads", "d_head", "d_model"), (0, 2, 1)),
    "W_V": ("attn_v.weight", ("kv_heads", "d_head", "d_model"), (0, 2, 1)),
    "W_O": ("attn_output.weight", ("d_model", "heads", "d_head"), (1, 2, 0)),
    "b_Q": ("attn_q.bias", ("heads", "d_head"), (0, 1)),
    "b_K": ("attn_k.bias", ("kv_heads", "d_head"), (0, 1)),
    "b_V": ("attn_v.bias", ("kv_heads", "d_head"), (0, 1)),
    "W_in": ("ffn_up.weight", ("d_mlp", "d_model"), (1, 0)),
    "W_gate": ("ffn_gate.weight", ("d_mlp", "d_model"), (1, 0)),
    "W_out": ("ffn_down.weight", ("d_model", "d_mlp"), (1, 0)),
    "ln1_w": ("attn_norm.weight", ("d_model",), (0,)),
    "ln2_w": ("ffn_norm.weight", ("d_model",), (0,)),
}


def _layer_weight(model: Any, layer: int, what: str):
    """TransformerLens's `what` (W_Q, b_K, W_in, ln1_w, ...) of one layer;
    a bias the model lacks is zeros, as TransformerLens gives."""
    cfg = model.cfg
    sizes = {"heads": cfg.n_heads, "kv_heads": cfg.n_key_value_heads, "d_head": cfg.d_head,
             "d_model": cfg.d_model, "d_mlp": cfg.d_mlp}
    name, shape, transpose = _LAYER_WEIGHTS[what]
    shape = tuple(sizes[k] for k in shape)
    t = Weights(model).tensor(f"blk.{layer}.{name}", required=not what.startswith("b_"))
    if t is None:
        return np.zeros(shape, dtype=np.float32)
    return np.ascontiguousarray(t.reshape(shape).transpose(transpose))


def _stacked(model: Any, what: str):
    """[n_layers, ...] of _layer_weight."""
    return np.stack([_layer_weight(model, l, what) for l in range(model.cfg.n_layers)])


class WeightAttributes:
    """Mixed into attn.Model: W_E, W_Q, ... as properties (class Weights),
    and blocks[l] (class Block)."""

    @property
    def _weights(self) -> Weights:
        return Weights(self)

    @property
    def W_E(self):
        return self._weights.tensor("token_embd.weight")

    @property
    def W_U(self):
        # output.weight is token_embd's where the head is tied (attn_decoder_weight)
        return np.ascontiguousarray(self._weights.tensor("output.weight").T)

    @property
    def b_U(self):
        return np.zeros(self.cfg.d_vocab, dtype=np.float32)

    @property
    def b_O(self):
        return np.zeros((self.cfg.n_layers, self.cfg.d_model), dtype=np.float32)

    @property
    def ln_final_w(self):
        return self._weights.tensor("output_norm.weight")

    @property
    def blocks(self) -> List["Block"]:
        """TransformerLens's model.blocks: blocks[l].attn.W_Q (that layer's
        weights, read on access), blocks[l].attn.hook_pattern.name, ..."""
        return [Block(self, l) for l in range(self.cfg.n_layers)]


def _stacked_property(what: str):
    return property(lambda self: _stacked(self, what), doc=f"{what} of every layer (class Weights)")


for _what in _LAYER_WEIGHTS:
    setattr(WeightAttributes, _what, _stacked_property(_what))
del _what


# ------------------------------------------------------------- blocks

@dataclass(frozen=True)
class HookPoint:
    """A hook point as TransformerLens's HookPoint shows it: its name (what
    a hook function is told, and what run_with_hooks takes)."""

    name: str


class _Part:
    """A block's sub-module (attn, mlp, ln1, ln2, or the block itself): its
    weights, read on access, and its hook points."""

    def __init__(self, model: Any, layer: int, prefix: str, weights: Dict[str, str], hooks: Sequence[str]):
        self._model, self._layer, self._prefix = model, layer, prefix
        self._weight_names, self._hooks = weights, tuple(hooks)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._weight_names:
            return _layer_weight(self._model, self._layer, self._weight_names[name])
        if name in self._hooks:
            return HookPoint(f"blocks.{self._layer}.{self._prefix}{name}")
        raise AttributeError(f"{type(self).__name__} has no {name!r} (weights: {sorted(self._weight_names)}, "
                             f"hooks: {list(self._hooks)})")

    def __dir__(self):
        return sorted(set(self._weight_names) | set(self._hooks))


class Block(_Part):
    """blocks[l]: .attn, .mlp, .ln1, .ln2 and the stream's hooks."""

    def __init__(self, model: Any, layer: int):
        super().__init__(model, layer, "", {}, ("hook_resid_pre", "hook_q_input", "hook_k_input", "hook_v_input",
                                                "hook_attn_out", "hook_resid_mid", "hook_mlp_out",
                                                "hook_resid_post"))
        self.attn = _Part(model, layer, "attn.",
                          {k: k for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")},
                          ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_attn_scores",
                           "hook_pattern", "hook_z", "hook_result"))
        self.mlp = _Part(model, layer, "mlp.", {k: k for k in ("W_in", "W_gate", "W_out")},
                         ("hook_pre", "hook_pre_linear", "hook_post"))
        self.ln1 = _Part(model, layer, "ln1.", {"w": "ln1_w"}, ("hook_scale", "hook_normalized"))
        self.ln2 = _Part(model, layer, "ln2.", {"w": "ln2_w"}, ("hook_scale", "hook_normalized"))

    def __repr__(self) -> str:
        return f"Block({self._layer})"
