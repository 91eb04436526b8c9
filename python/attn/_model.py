"""attn.Model: a real pretrained decoder (a GGUF file or a Hugging Face
checkpoint of an architecture the decoder runs: qwen2, qwen3, gemma3, llama,
as attn_decoder_architecture lists them) run by libattn_model in float32,
every layer's attention through attn's kernels.

    m = attn.Model("~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    ids = m.tokenize("我吃了一个苹果")                 # int32 [L]
    out = m.forward(ids, hidden=True, attention=True)
    out.logits        # float32 [L, V]   (or [1, V] with last_only=True)
    out.hidden        # float32 [N + 1, L, d]  row 0 the embeddings, row l + 1 after layer l
    out.attention     # {layer: float32 [Hq, L, L]}
    m.top(out.logits[-1], 5)                           # [(id, text, probability)] * 5

    logits, cache = m.run_with_cache("我吃了一个苹果")  # TransformerLens's names
    cache["blocks.3.attn.hook_pattern"]                # [1, Hq, L, L]

    new = m.generate("这台电脑来自苹果", max_tokens=20)  # int32 ids, greedy through the KV cache
    m.detokenize(new)
    for token in m.generate("Once upon a time", max_tokens=50, temperature=0.8, top_p=0.95,
                            seed=1, stream=True):       # one id at a time, as they come
        print(m.detokenize([token]), end="")

    m.chat([{"role": "user", "content": "Write a haiku about apples"}])  # the reply, as text:
                                                        # the prompt written by the model's own chat template

Shapes as in attn_decoder.h: L tokens, N layers, d d_model, Hq query
heads, V vocabulary.  The weights stay as the file stores them, read where
it is mapped (Model(weights="f32") dequantizes them to float32 when the model
opens instead: 4 bytes a parameter, 2.4 GiB for Qwen2.5-Coder 0.5B).  The GIL is released while the model opens and while a
forward runs; a Model may be used from several threads at once.  Ctrl-C
stops a forward at the next layer boundary (KeyboardInterrupt).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core, _lens
from ._lens import ActivationCache, HookPoint
from ._sdpa import _KERNELS

__all__ = ["Model", "ModelOutput", "Session", "HookPoint", "ActivationCache"]

_RETURN_TYPES = ("logits", "loss", "both", None)
#: hook points whose tensors have two position axes (queries, keys), after the batch and head axes
_TWO_POS = ("hook_attn_scores", "hook_pattern")
# The points attn_decoder_backward gives a gradient at (all but the per-head inputs).
_GRAD_POINTS = sum({1 << _core.hook_parse(name)[0] for name in _core.hook_names(1)}) & ~sum(
    1 << _core.hook_parse(f"blocks.0.hook_{w}_input")[0] for w in "qkv")

#: every hook point's bit (1 << point), the points numbered by the library's
#: one vocabulary of names (attn_interp.h; a model of one layer has each once)
_ALL_POINTS = sum({1 << _core.hook_parse(name)[0] for name in _core.hook_names(1)})


def _point_of(name: str, n_layers: int) -> Optional[int]:
    """The point number of a full hook name of a model of n_layers layers, or
    None (parsed by the library, attn_hook_parse)."""
    parsed = _core.hook_parse(name)
    if parsed is None or parsed[1] >= n_layers:
        return None
    return parsed[0]

def _place(cache, name, t, b, off, B, width, batched):
    """t [1, ...] (sequence b's activation, or its gradient) at its positions
    off .. in cache[name] [B, ...] of a padded batch (padding 0, -inf in
    hook_attn_scores); unbatched, cache[name] is t."""
    if not batched:
        cache[name] = t
        return
    two = name.removesuffix("_grad").endswith(_TWO_POS)
    if name not in cache:
        shape = list(t.shape)
        shape[0] = B
        for a in (2, 3) if two else (1,):
            shape[a] = width
        fill = -np.inf if name.endswith("hook_attn_scores") else 0.0
        cache[name] = np.full(shape, fill, dtype=np.float32)
    n = t.shape[2] if two else t.shape[1]
    if two:
        cache[name][b, :, off:off + n, off:off + n] = t[0]
    else:
        cache[name][b, off:off + n] = t[0]


def _metric_gradient(metric, logits, seqs, offsets):
    """dmetric/dlogits [B, width, V]: metric None is the mean next-token
    cross-entropy over the real tokens (return_type="loss"); a callable is
    given the logits as a torch tensor [B, width, V] and returns a scalar
    tensor (torch's autograd differentiates it)."""
    if metric is None:
        dl = np.zeros(logits.shape, dtype=np.float32)
        count = sum(max(ids.size - 1, 0) for ids in seqs)
        for b, (ids, off) in enumerate(zip(seqs, offsets)):
            if ids.size < 2:
                continue
            row = logits[b, off:off + ids.size - 1].astype(np.float64)
            p = np.exp(row - row.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            p[np.arange(ids.size - 1), ids[1:]] -= 1.0
            dl[b, off:off + ids.size - 1] = (p / count).astype(np.float32)
        return dl
    if not callable(metric):
        raise TypeError(f"metric: None (the loss) or a callable of the logits, got {metric!r}")
    try:
        import torch
    except ImportError as e:
        raise ImportError("metric=callable differentiates it with torch, which is not installed; "
                          "metric=None (the mean next-token loss) needs nothing") from e
    lt = torch.tensor(logits, requires_grad=True)
    value = metric(lt)
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise ValueError("metric: must return a scalar torch tensor of the logits")
    value.backward()
    return lt.grad.detach().numpy().astype(np.float32)


def _as_numpy_ids(x: Any) -> np.ndarray:
    """Token ids (or an attention mask) as numpy, a torch tensor included."""
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


_KV_DTYPES = {"float32": _core.F32, "f32": _core.F32, "float16": _core.F16, "f16": _core.F16,
              "bfloat16": _core.BF16, "bf16": _core.BF16, "q8_0": _core.Q8_0, "fp8": _core.FP8_E4M3,
              "fp8_e4m3": _core.FP8_E4M3}


@dataclass
class ModelOutput:
    """What Model.forward computed (None where not asked for)."""

    ids: np.ndarray  #: int32 [L]
    logits: np.ndarray  #: float32 [L, V], or [1, V] with last_only
    hidden: Optional[np.ndarray] = None  #: float32 [N + 1, L, d]
    attention: Dict[int, np.ndarray] = field(default_factory=dict)  #: layer -> float32 [Hq, L, L]


def _layers(request: Union[bool, int, Iterable[int], None], n_layers: int) -> List[int]:
    if request is None or request is False:
        return []
    if request is True:
        return list(range(n_layers))
    if isinstance(request, (int, np.integer)):
        request = [int(request)]
    layers = []
    for layer in request:
        layer = int(layer)
        if layer < -n_layers or layer >= n_layers:
            raise ValueError(f"attention: layer {layer} is outside the model's {n_layers} layers")
        layers.append(layer % n_layers)
    return sorted(set(layers))


#: attn_decoder_options' weights and precision, by name.
_WEIGHTS = {"stored": 0, "f32": 1}
_PRECISIONS = {"exact": 0, "fast": 1}


class Model(_lens.WeightAttributes):
    """A decoder opened once: its configuration, its tokenizer and its
    float32 forward (attn_decoder.h, attn_tokenizer.h).  path is a GGUF file,
    or a Hugging Face checkpoint (a directory with config.json and
    model.safetensors or its shards; attn_safetensors.h) with its
    tokenizer.json when it has one this library reads (byte-level BPE);
    without one, pass token ids (config["tokenizer"] is None).

    weights: "stored" (default: the matrices stay as the file stores them,
    read where it is mapped) or "f32" (converted to float32 at load, the
    reference).  precision: "exact" (default: the dequantized weights times
    float32 activations) or "fast" (activations rounded to 8 bits per block
    of 32, integer dot products; its error on the real models is in
    docs/quant.md)."""

    def __init__(self, path: Union[str, os.PathLike], *, weights: str = "stored",
                 precision: str = "exact") -> None:
        if weights not in _WEIGHTS:
            raise ValueError(f"weights must be one of {sorted(_WEIGHTS)}, got {weights!r}")
        if precision not in _PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(_PRECISIONS)}, got {precision!r}")
        self.path = os.path.expanduser(os.fspath(path))
        self._handle = _core.model_open(self.path, _WEIGHTS[weights], _PRECISIONS[precision])
        #: the configuration read from the file (architecture, n_layers,
        #: d_model, n_heads, n_kv_heads, head_dim, vocab, rope_theta, ...)
        #: and the tokenizer's facts (bos_id, eos_id, add_bos, ...)
        self.config: Dict[str, Any] = _core.model_config(self._handle)
        #: TransformerLens's tokenizer.padding_side: where to_tokens pads a
        #: batch, and where a padded batch of ids is read as having its padding
        self.padding_side: str = "right"

    @property
    def cfg(self) -> "_lens.HookedConfig":
        """TransformerLens's config object (cfg.n_layers, cfg.d_model,
        cfg.n_heads, cfg.n_key_value_heads, cfg.d_head, cfg.d_mlp,
        cfg.d_vocab, ...); Model.config is the library's own dict."""
        cfg = self.__dict__.get("_cfg")
        if cfg is None:
            cfg = self.__dict__["_cfg"] = _lens.HookedConfig.from_config(self.config, self.path)
        return cfg

    def __repr__(self) -> str:
        c = self.config
        return (f"attn.Model({self.path!r}: {c['architecture']}, {c['n_layers']} layers, d_model "
                f"{c['d_model']}, {c['n_heads']} query heads on {c['n_kv_heads']} key/value heads, "
                f"head_dim {c['head_dim']}, vocab {c['vocab']})")

    # ------------------------------------------------------------ tokenizer

    def tokenize(self, text: Union[str, bytes], *, split_special: bool = False,
                 add_bos: Optional[bool] = None) -> np.ndarray:
        """The ids of text (int32 [L]), as Hugging Face's tokenizer gives them.
        Special tokens written in the text (``<|im_start|>``) stay whole unless
        split_special; BOS is prepended where the model asks for it
        (config["add_bos"]) unless add_bos=False.  add_bos=True on a model that
        adds none prepends config["bos_id"]."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids = np.frombuffer(_core.model_tokenize(self._handle, data, bool(split_special),
                                                 add_bos is False), dtype=np.int32).copy()
        if add_bos and not self.config["add_bos"]:
            if self.config["bos_id"] < 0:
                raise ValueError("add_bos=True: this model's vocabulary names no BOS token")
            ids = np.concatenate([np.array([self.config["bos_id"]], dtype=np.int32), ids])
        return ids

    def _ids(self, ids: Any) -> np.ndarray:
        a = np.asarray(ids)
        if a.ndim != 1:
            raise ValueError(f"ids: expected one sequence [L], got shape {a.shape}")
        if a.dtype.kind not in "iu":
            raise TypeError(f"ids: integer token ids expected, got dtype {a.dtype}")
        if a.size and (a.min() < 0 or a.max() >= self.config["vocab"]):
            bad = int(np.flatnonzero((a < 0) | (a >= self.config["vocab"]))[0])
            raise ValueError(f"ids[{bad}] = {int(a[bad])} is outside the vocabulary [0, {self.config['vocab']})")
        return np.ascontiguousarray(a, dtype=np.int32)

    def detokenize(self, ids: Any, *, skip_special: bool = False, errors: str = "replace") -> str:
        """The text of ids.  A part of a sequence may end inside a character:
        errors="replace" (the default) writes U+FFFD for each invalid byte,
        as Hugging Face's decoders do; errors="strict" raises."""
        replace = errors == "replace"  # the library's U+FFFD per invalid byte, as HF's
        raw = _core.model_detokenize(self._handle, self._ids(ids), bool(skip_special), replace)
        return raw.decode("utf-8", errors="strict" if replace else errors)

    def token_piece(self, token_id: int) -> str:
        """The token's piece as the vocabulary spells it ("Ġhello", "▁hello", "<0x41>")."""
        piece, _type = _core.model_token(self._handle, int(token_id))
        return piece.decode("utf-8", errors="replace")

    def piece_text(self, token_id: int) -> str:
        """The token's piece as readable text: a byte-level piece's bytes
        decoded ("èĭ¹æŀľ" -> "苹果", "Ġthe" -> " the"), SentencePiece's
        "▁" as a space; bytes that end inside a character as \\xNN."""
        return _lens.readable_piece(self.token_piece(token_id), self.config["tokenizer"])

    def to_str_tokens(self, input: Any, prepend_bos: Optional[bool] = None) -> Any:
        """Each token decoded on its own (TransformerLens's to_str_tokens):
        input is a text (tokenized first, BOS as the model wants or as
        prepend_bos says), ids [L], a batch of texts or ids [B, L] (a list
        per sequence)."""
        if isinstance(input, (str, bytes)):
            input = self.tokenize(input, add_bos=prepend_bos)
        elif isinstance(input, (list, tuple)) and input and isinstance(input[0], (str, bytes)):
            return [self.to_str_tokens(text, prepend_bos) for text in input]
        a = np.asarray(input)
        if a.ndim == 2:
            return [self.to_str_tokens(row) for row in a]
        return [self.detokenize([i]) for i in self._ids(a)]

    def to_tokens(self, input: Any, prepend_bos: Optional[bool] = None,
                  padding_side: Optional[str] = None) -> np.ndarray:
        """Token ids [B, L] int32 (TransformerLens's to_tokens): a text gives
        [1, L]; a list of texts is padded to its longest with the pad id
        (cfg's pad_id, else EOS) on padding_side (default
        Model.padding_side, "right").  BOS as the model wants, or as
        prepend_bos says."""
        texts = [input] if isinstance(input, (str, bytes)) else list(input)
        seqs = [self.tokenize(t, add_bos=prepend_bos) for t in texts]
        return self._pad(seqs, padding_side)[0]

    def to_string(self, tokens: Any) -> Union[str, List[str]]:
        """The text of ids [L] (a str) or of each row of [B, L] (a list)."""
        a = np.asarray(tokens)
        if a.ndim == 2:
            return [self.detokenize(row) for row in a]
        return self.detokenize(a)

    def to_single_token(self, string: str) -> int:
        """The id of a text that is one token (no BOS); ValueError otherwise."""
        ids = self.tokenize(string, add_bos=False)
        if ids.size != 1:
            raise ValueError(f"{string!r} is {ids.size} tokens, not one: {self.to_str_tokens(ids)}")
        return int(ids[0])

    def find_token(self, piece: Union[str, bytes]) -> int:
        """The id whose piece is exactly piece, or -1.  Normal text is found
        too: "公司" is looked up as the byte-level vocabulary spells it
        ("åħ¬åı¸"), " the" as "Ġthe" or "▁the"."""
        data = piece.encode("utf-8") if isinstance(piece, str) else bytes(piece)
        found = int(_core.model_find(self._handle, data))
        if found >= 0:
            return found
        kind = self.config["tokenizer"]
        if kind == "bpe":
            spelled = _lens.byte_level_spelling(data)
        elif kind == "spm":
            spelled = data.decode("utf-8", errors="replace").replace(" ", "\u2581")
        else:
            return -1
        return int(_core.model_find(self._handle, spelled.encode("utf-8")))

    # ------------------------------------------------------------- batches

    def _pad_id(self) -> int:
        c = self.config
        return c["pad_id"] if c["pad_id"] >= 0 else max(c["eos_id"], 0)

    def _pad(self, seqs: List[np.ndarray], padding_side: Optional[str]):
        """(tokens [B, Lmax] int32, offsets [B]): each sequence at its offset."""
        side = self.padding_side if padding_side is None else padding_side
        if side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {side!r}")
        width = max((len(q) for q in seqs), default=0)
        tokens = np.full((len(seqs), width), self._pad_id(), dtype=np.int32)
        offsets = []
        for b, q in enumerate(seqs):
            off = width - len(q) if side == "left" else 0
            tokens[b, off:off + len(q)] = q
            offsets.append(off)
        return tokens, offsets

    def _sequences(self, input: Any, prepend_bos: Optional[bool], attention_mask: Any,
                   padding_side: Optional[str]):
        """(sequences, offsets, width, batched): each sequence's real ids, where
        it sits in the padded batch, the batch's width, and whether the input
        was a batch (else the result keeps TransformerLens's batch of 1)."""
        if isinstance(input, (str, bytes)):
            ids = self.tokenize(input, add_bos=prepend_bos)
            return [ids], [0], ids.size, False
        if isinstance(input, (list, tuple)) and input and isinstance(input[0], (str, bytes)):
            seqs = [self.tokenize(t, add_bos=prepend_bos) for t in input]
            _, offsets = self._pad(seqs, padding_side)
            return seqs, offsets, max(q.size for q in seqs), True
        if isinstance(input, (list, tuple)) and input and not np.isscalar(input[0]):
            seqs = [self._ids(q) for q in input]  # ragged ids
            _, offsets = self._pad(seqs, padding_side)
            return seqs, offsets, max(q.size for q in seqs), True
        a = _as_numpy_ids(input)
        if a.ndim == 1:
            ids = self._ids(a)
            return [ids], [0], ids.size, False
        if a.ndim != 2:
            raise ValueError(f"tokens: expected [L] or [B, L], got shape {a.shape}")
        mask = None if attention_mask is None else _as_numpy_ids(attention_mask).astype(bool)
        if mask is not None and mask.shape != a.shape:
            raise ValueError(f"attention_mask has shape {mask.shape}, tokens {a.shape}")
        seqs, offsets = [], []
        for b, row in enumerate(a):
            keep = mask[b] if mask is not None else self._real(row, padding_side)
            where = np.flatnonzero(keep)
            if where.size == 0:
                raise ValueError(f"tokens row {b} is all padding")
            if where[-1] - where[0] + 1 != where.size:
                raise ValueError(f"attention_mask row {b}: the real tokens must be contiguous")
            seqs.append(self._ids(row[where[0]:where[-1] + 1]))
            offsets.append(int(where[0]))
        return seqs, offsets, a.shape[1], True

    def _real(self, row: np.ndarray, padding_side: Optional[str]) -> np.ndarray:
        """Which ids of a padded row are real, read as to_tokens pads (pad ids
        at the padding side; a pad id equal to BOS or EOS keeps one)."""
        side = self.padding_side if padding_side is None else padding_side
        pad = self._pad_id()
        keep = np.ones(row.size, dtype=bool)
        order = range(row.size) if side == "left" else range(row.size - 1, -1, -1)
        for i in order:
            if row[i] != pad:
                break
            keep[i] = False
        if side == "left" and pad == self.config["bos_id"] and self.config["add_bos"] and not keep[0]:
            keep[int(np.flatnonzero(~keep)[-1])] = True  # the BOS the text began with
        if not keep.any():
            keep[0] = True
        return keep

    # -------------------------------------------------------------- forward

    def forward(self, tokens: Union[str, bytes, Sequence[int], np.ndarray], *, hidden: bool = False,
                attention: Union[bool, int, Iterable[int]] = False, last_only: bool = False,
                kernel: str = "auto") -> ModelOutput:
        """The causal forward over one sequence (a text is tokenized first).

        hidden=True returns the residual stream [N + 1, L, d]; attention=True
        (or a layer, or layers) returns those layers' weights [Hq, L, L];
        last_only=True computes the logits of the last position only
        ([1, V]: a V-row product instead of L of them).  kernel "auto"
        (flash) or "ref" (the double-precision reference) for attention."""
        ids = self.tokenize(tokens) if isinstance(tokens, (str, bytes)) else self._ids(tokens)
        if ids.size == 0:
            raise ValueError("tokens: no tokens (a forward needs at least one)")
        if kernel not in _KERNELS:
            raise ValueError(f"kernel must be one of {sorted(_KERNELS)}, got {kernel!r}")
        c = self.config
        L, N = ids.size, c["n_layers"]
        logits = np.empty((1 if last_only else L, c["vocab"]), dtype=np.float32)
        hid = np.empty((N + 1, L, c["d_model"]), dtype=np.float32) if hidden else None
        layers = _layers(attention, N)
        maps = {layer: np.empty((c["n_heads"], L, L), dtype=np.float32) for layer in layers}
        slots = [maps.get(layer) for layer in range(N)] if maps else None
        _core.model_forward(self._handle, ids, logits, hid, slots, bool(last_only), _KERNELS[kernel])
        return ModelOutput(ids=ids, logits=logits, hidden=hid, attention=maps)

    __call__ = forward

    def hook_names(self) -> List[str]:
        """Every hook point's full name, in the order a forward reaches them
        (attn_decoder.h, "hook points")."""
        return list(_core.hook_names(self.config["n_layers"]))

    def run_with_hooks(self, input: Any, *,
                       fwd_hooks: Sequence[Tuple[Union[str, Callable[[str], bool]], Callable]] = (),
                       bwd_hooks: Sequence[Tuple[Union[str, Callable[[str], bool]], Callable]] = (),
                       metric: Optional[Callable[[Any], Any]] = None,
                       return_type: Optional[str] = "logits", last_only: bool = False,
                       prepend_bos: Optional[bool] = None, padding_side: Optional[str] = None,
                       attention_mask: Any = None, kernel: str = "auto") -> Any:
        """The forward with TransformerLens-style hooks: each (name or
        name filter, fn) calls fn(tensor, hook) at the matching points, with
        tensor the activation with a batch axis of 1 (e.g. hook_pattern
        [1, Hq, L, L], hook_z [1, L, Hq, Dh]) and hook.name its name.  fn may
        change tensor in place or return a new array of its shape (activation
        patching, ablation): everything after sees the new values; writing
        hook_pattern changes the weights and keeps v (z = pattern . v).

        input: a text, ids [L], or a batch (texts, ragged ids, or ids
        [B, L] padded as to_tokens pads them, or with attention_mask [B, L]).
        A batch runs sequence by sequence, so each result is the sequence's
        alone, and a hook is called once per sequence (its batch axis 1).
        return_type "logits" (the logits [B, L, V], or [B, 1, V] with
        last_only; 0 at padding), "loss" (the mean next-token cross-entropy
        over the real tokens), "both" ((logits, loss)) or None.

        bwd_hooks: (name or filter, fn) called with the gradient of the
        metric at each matching point (attn_decoder_backward: every point
        but hook_q_input .. hook_v_input), after the forward, layers in
        reverse; fn may return a changed gradient, which flows on.  metric:
        None, the mean next-token cross-entropy (return_type "loss"); or a
        function of the logits as a torch tensor [B, L, V] returning a
        scalar tensor (torch differentiates it), e.g.
        lambda logits: logits[0, -1, paris] - logits[0, -1, rome]."""
        bwd = (list(bwd_hooks), None, metric) if bwd_hooks else None
        return self._run(input, list(fwd_hooks), None, return_type, last_only, prepend_bos, padding_side,
                         attention_mask, kernel, bwd)[0]

    def run_with_cache(self, input: Any, *,
                       names_filter: Union[None, str, Sequence[str], Callable[[str], bool]] = None,
                       fwd_hooks: Sequence[Tuple[Union[str, Callable[[str], bool]], Callable]] = (),
                       return_type: Optional[str] = "logits", remove_batch_dim: bool = False,
                       incl_bwd: bool = False, metric: Optional[Callable[[Any], Any]] = None,
                       prepend_bos: Optional[bool] = None, padding_side: Optional[str] = None,
                       attention_mask: Any = None, kernel: str = "auto") -> Tuple[Any, ActivationCache]:
        """(logits [B, L, V], cache) in TransformerLens's habit: every hook
        point's activation as the forward used it (after any fwd_hooks),
        batch axis first, under its full name (Model.hook_names()):

            hook_embed                       [B, L, d]   the embeddings (Gemma's scaled)
            blocks.{l}.hook_resid_pre        [B, L, d]   the residual stream into layer l
            blocks.{l}.attn.hook_q / _k / _v [B, L, H, Dh] before RoPE (hook_rot_q/_k after)
            blocks.{l}.attn.hook_attn_scores [B, Hq, L, L] (-inf where hidden)
            blocks.{l}.attn.hook_pattern     [B, Hq, L, L]
            blocks.{l}.attn.hook_z           [B, L, Hq, Dh]
            blocks.{l}.attn.hook_result      [B, L, Hq, d]   each head after W_O (sum: the projection)
            blocks.{l}.hook_attn_out, hook_resid_mid, hook_mlp_out, hook_resid_post  [B, L, d]
            blocks.{l}.hook_q_input / _k_input / _v_input  [B, L, H, d]  resid_pre per head
            blocks.{l}.ln1.hook_scale, ln2.hook_scale, ln_final.hook_scale  [B, L, 1]
            blocks.{l}.ln1.hook_normalized, ln2..., ln_final.hook_normalized  [B, L, d]
                                             (the norm's output times its weight: what the
                                             next projection reads, TransformerLens's with fold_ln)
            blocks.{l}.mlp.hook_pre, hook_pre_linear, hook_post  [B, L, d_mlp]

        The cache is an attn.ActivationCache (a dict with cache["pattern", 3],
        accumulated_resid, decompose_resid, apply_ln_to_stack, ...).
        names_filter: a name, a glob ("blocks.*.attn.hook_pattern"), a list
        of names and globs, or a predicate.  input, return_type and batches
        as run_with_hooks; in a padded batch each sequence's activations sit
        at its positions, padding 0 (-inf in hook_attn_scores).
        incl_bwd: the cache also holds <name>_grad, the gradient of metric
        (run_with_hooks': by default the mean next-token loss) at each kept
        point but hook_q_input .. hook_v_input, as TransformerLens's
        run_with_cache(incl_bwd=True)."""
        keep = _lens.names_filter_predicate(names_filter)
        bwd = ([], keep, metric) if incl_bwd else None
        out, cache = self._run(input, list(fwd_hooks), keep, return_type, False, prepend_bos, padding_side,
                               attention_mask, kernel, bwd)
        if remove_batch_dim:
            cache = cache.remove_batch_dim()
            if isinstance(out, np.ndarray):
                out = out[0]
        return out, cache

    def attribution_patching(self, clean: Any, corrupted: Any, metric: Optional[Callable[[Any], Any]] = None, *,
                             names_filter: Union[None, str, Sequence[str], Callable[[str], bool]] = None,
                             positions: Optional[Sequence[int]] = None,
                             prepend_bos: Optional[bool] = None) -> Dict[str, np.ndarray]:
        """Attribution patching (Nanda 2023): the linear estimate of what
        patching each activation of the corrupted run into the clean one does
        to metric, from one clean forward and backward and one corrupted
        forward: (corrupted - clean) . d metric / d activation, at the clean
        point.  Summed over the last axis (d_model, d_head, d_mlp): [B, L]
        for the stream's points, [B, L, H] per head; hook_pattern and
        hook_attn_scores per element [B, H, L, S] (-inf scores give 0).
        metric as run_with_hooks' (None: the mean next-token loss).  Its
        error is the linear approximation's: exact for a metric linear in
        the activation up to the point, good for small changes
        (tests/python/test_gradients.py measures it against real patching).

        Without positions, clean and corrupted have the same number of
        tokens.  positions (a list of ints; the rule of `attn model trace
        --patch HOOK@POSITIONS`: p >= 0 is index p in both runs, p < 0
        counts from the end of each) compares two runs of different lengths
        at aligned positions (positions=[-1]: the last token of each); the
        position axis then has len(positions), in that order, and clean and
        corrupted are one sequence each.  hook_pattern and hook_attn_scores
        (a position axis per query and per key) need runs of one length:
        both axes are then taken at positions."""
        keep = _lens.names_filter_predicate(names_filter)
        _, grads = self.run_with_cache(clean, names_filter=keep, incl_bwd=True, metric=metric,
                                       prepend_bos=prepend_bos)
        _, corrupt = self.run_with_cache(corrupted, names_filter=keep, prepend_bos=prepend_bos)
        at_clean = at_corrupt = None
        if positions is not None:
            at_clean, at_corrupt = self._aligned(clean, corrupted, positions, prepend_bos)
        out = {}
        for name, grad in grads.items():
            if not name.endswith("_grad"):
                continue
            point = name[:-len("_grad")]
            a, b = np.asarray(grads[point], dtype=np.float64), np.asarray(corrupt[point], dtype=np.float64)
            g = np.asarray(grad, dtype=np.float64)
            two = point.endswith(_TWO_POS)
            if at_clean is not None:
                if two and a.shape != b.shape:
                    raise ValueError(f"{point}: clean {a.shape} and corrupted {b.shape}: its query and key axes "
                                     f"need runs of one length (leave it out with names_filter)")
                axes = (2, 3) if two else (1,)
                for axis in axes:
                    a, g = np.take(a, at_clean, axis), np.take(g, at_clean, axis)
                    b = np.take(b, at_corrupt, axis)
            elif a.shape != b.shape:
                raise ValueError(f"{point}: clean {a.shape} and corrupted {b.shape}: the runs need the same tokens "
                                 f"count, or positions= to compare them at aligned positions")
            delta = np.where(np.isfinite(a) & np.isfinite(b), b - a, 0.0)
            product = delta * g
            out[point] = product if two else product.sum(-1)
        return out

    def _aligned(self, clean, corrupted, positions, prepend_bos):
        """(clean indices, corrupted indices) of positions in two runs, each
        one sequence: p >= 0 is p in both, p < 0 counts from each one's end."""
        if isinstance(positions, (int, np.integer)) or not len(positions):
            raise TypeError(f"positions: a non-empty list of ints, got {positions!r}")
        indices = []
        for which, run in (("clean", clean), ("corrupted", corrupted)):
            seqs, _, _, batched = self._sequences(run, prepend_bos, None, None)
            if batched and len(seqs) != 1:
                raise ValueError(f"positions: {which} is a batch of {len(seqs)}; positions compare one sequence "
                                 f"with one")
            L = seqs[0].size
            at = []
            for p in positions:
                if not isinstance(p, (int, np.integer)) or isinstance(p, bool):
                    raise TypeError(f"positions: ints, got {p!r}")
                q = int(p) + L if p < 0 else int(p)
                if not 0 <= q < L:
                    raise ValueError(f"positions: {int(p)} is outside the {which} run's {L} tokens")
                at.append(q)
            indices.append(np.array(at, dtype=np.intp))
        return indices[0], indices[1]

    # ------------------------------------------ the logit lens and attribution

    def _one_sequence(self, input: Any, prepend_bos: Optional[bool]) -> np.ndarray:
        """The ids of one sequence: a text (tokenized, BOS as prepend_bos
        says), ids [L], or ids [1, L] (TransformerLens's batch of one)."""
        if isinstance(input, (str, bytes)):
            ids = self.tokenize(input, add_bos=prepend_bos)
        else:
            a = _as_numpy_ids(input)
            if a.ndim == 2 and a.shape[0] == 1:
                a = a[0]
            ids = self._ids(a)
        if ids.size == 0:
            raise ValueError("input: no tokens")
        return ids

    @staticmethod
    def _position(position: int, L: int) -> int:
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)):
            raise TypeError(f"position: an int, got {position!r}")
        if not -L <= int(position) < L:
            raise ValueError(f"position {int(position)} is outside the run's {L} tokens")
        return int(position)

    def _token_id(self, token: Any, what: str) -> int:
        """A token given as an id or as a text that is one token (no BOS)."""
        if isinstance(token, (str, bytes)):
            ids = self.tokenize(token, add_bos=False)
            if ids.size != 1:
                raise ValueError(f"{what} {token!r} is {ids.size} tokens, not one: {self.to_str_tokens(ids)}")
            return int(ids[0])
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise TypeError(f"{what}: a token id or a text that is one token, got {token!r}")
        if not 0 <= int(token) < self.config["vocab"]:
            raise ValueError(f"{what} {int(token)} is outside the vocabulary [0, {self.config['vocab']})")
        return int(token)

    def logit_lens(self, input: Any, position: int = -1, *, prepend_bos: Optional[bool] = None) -> np.ndarray:
        """The logit lens (nostalgebraist 2020) at one position of one text
        or id sequence: the residual stream read as if each layer were the
        last, through the final RMSNorm (each row's own scale) and W_U, with
        the forward's own kernels (attn_model_logit_lens).  float32
        [n_layers + 1, vocab]: row 0 the embeddings, row l + 1 the stream
        after layer l; the last row is the model's logits there.  position:
        negative counts from the end.  `attn model trace --logit-lens`
        prints the same."""
        ids = self._one_sequence(input, prepend_bos)
        pos = self._position(position, ids.size)
        c = self.config
        logits = np.empty((c["n_layers"] + 1, c["vocab"]), dtype=np.float32)
        _core.model_logit_lens(self._handle, ids, pos, logits)
        return logits

    def logit_attribution(self, input: Any, token: Union[int, str], wrong: Union[int, str, None] = None,
                          position: int = -1, *, prepend_bos: Optional[bool] = None) -> Dict[str, Any]:
        """Direct logit attribution at one position of one text or id
        sequence (attn_model_logit_attribution): each component's share of
        logit[token] - logit[wrong] (wrong None: of logit[token] alone), the
        component dotted with the final norm's weight times W_U's column,
        the final norm's scale frozen at the final stream's (TransformerLens's
        logit_attrs over decompose_resid).  token and wrong: ids, or texts
        that are one token.  A dict of float64:

            embed   float         the embeddings' share
            attn    [n_layers]    each layer's hook_attn_out
            mlp     [n_layers]    each layer's hook_mlp_out
            heads   [n_layers, n_heads]  each head's z_h . W_O^h (on Gemma 3
                                  through post_attention_norm, its scale frozen)

        embed + attn.sum() + mlp.sum() is the logit (difference), and each
        layer's heads add up to its attn, up to rounding.  `attn model trace
        --logit-attribution` prints the same."""
        ids = self._one_sequence(input, prepend_bos)
        pos = self._position(position, ids.size)
        answer = self._token_id(token, "token")
        other = -1 if wrong is None else self._token_id(wrong, "wrong")
        N, H = self.config["n_layers"], self.config["n_heads"]
        attn = np.empty(N, dtype=np.float64)
        mlp = np.empty(N, dtype=np.float64)
        heads = np.empty((N, H), dtype=np.float64)
        embed = _core.model_logit_attribution(self._handle, ids, pos, answer, other, attn, mlp, heads)
        return {"embed": float(embed), "attn": attn, "mlp": mlp, "heads": heads}

    def weights_not_explanation(self, input: Any, layer: int, *, position: int = -1, tolerance: float = 1e-3,
                                exact_limit: int = 0, starts: int = 0) -> List[Dict[str, Any]]:
        """The chapter's "weights are not an explanation" on every head of a
        layer: for the query at position (-1: the last), the weight row
        farthest in L1 from the head's own that gives the same z within
        tolerance in every coordinate (attn.nullspace, attn_nullspace_search,
        over the keys the query may read and that head's v rows).  Bounded
        time: the search's work budget applies per head (exact up to
        exact_limit visible keys, the library's default when 0; beyond it a
        local search from starts starting points, a lower bound).  One dict a
        head: head, weights [L] (its row), moved [L] (the row found), l1,
        max_output_change, exact.  The CLI's `attn model trace --nullspace
        LAYER:all` prints the same search."""
        from ._sdpa import nullspace

        names = [f"blocks.{layer}.attn.hook_pattern", f"blocks.{layer}.attn.hook_attn_scores",
                 f"blocks.{layer}.attn.hook_v"]
        _, cache = self.run_with_cache(input, names_filter=names, remove_batch_dim=True)
        pattern, scores, v = (cache[n] for n in names)
        Hq, L = pattern.shape[0], pattern.shape[1]
        pos = position if position >= 0 else L + position
        if not 0 <= pos < L:
            raise ValueError(f"position {position}: the run has {L} tokens")
        group = Hq // v.shape[1]
        out = []
        for h in range(Hq):
            row = np.ascontiguousarray(pattern[h, pos], dtype=np.float32)
            values = np.ascontiguousarray(v[:, h // group], dtype=np.float32)
            moved, info = nullspace(row, values, tolerance=tolerance, visible=np.isfinite(scores[h, pos]),
                                    exact_limit=exact_limit, starts=starts)
            out.append({"head": h, "weights": row, "moved": moved, **info})
        return out

    def _cache_of(self, input: Any, names: Sequence[str], prepend_bos: Optional[bool]) -> ActivationCache:
        """One sequence's cache of the hooks names (globs allowed), no batch axis."""
        _, cache = self.run_with_cache(input, names_filter=list(names), return_type=None, remove_batch_dim=True,
                                       prepend_bos=prepend_bos)
        return cache

    def value_weighted_norms(self, input: Any, layer: int, *, use_W_O: bool = True,
                             prepend_bos: Optional[bool] = None) -> np.ndarray:
        """Kobayashi et al.'s ||alpha_ij v_j W_O^h|| of layer ``layer`` over
        one text or id sequence, [n_heads, L, L] float32 (use_W_O False:
        ||alpha_ij v_j||); `attn model trace --value-norms` prints them."""
        names = [f"blocks.{layer}.attn.hook_pattern", f"blocks.{layer}.attn.hook_v"]
        return self._cache_of(input, names, prepend_bos).value_weighted_norms(layer, use_W_O)

    def attention_rollout(self, input: Any, *, head: Optional[int] = None, residual: float = 0.5,
                          prepend_bos: Optional[bool] = None) -> np.ndarray:
        """Abnar & Zuidema's rollout over one sequence's layers, [n_layers, L, L]
        float64 (`attn model trace --rollout`)."""
        cache = self._cache_of(input, ["blocks.*.attn.hook_pattern"], prepend_bos)
        return cache.attention_rollout(head=head, residual=residual)

    def attention_flow(self, input: Any, position: int = -1, *, head: Optional[int] = None, residual: float = 0.5,
                       prepend_bos: Optional[bool] = None) -> np.ndarray:
        """Abnar & Zuidema's flow into ``position`` after the last layer, [L]
        float64 (`attn model trace --rollout --flow`)."""
        cache = self._cache_of(input, ["blocks.*.attn.hook_pattern"], prepend_bos)
        return cache.attention_flow(position, head=head, residual=residual)

    @staticmethod
    def _keep(names_filter):
        """names_filter (None: all, a name, a glob, names and globs, or a predicate) as a predicate."""
        return _lens.names_filter_predicate(names_filter)

    def _run(self, input, hooks, keep, return_type, last_only, prepend_bos, padding_side, attention_mask,
             kernel, bwd=None):
        """(what return_type asks for, ActivationCache or None): each sequence
        run alone, the results placed at its positions in the padded batch.
        bwd: None, or (bwd_hooks, grad_keep, metric): then a backward per
        sequence (_backward) after the forwards."""
        if return_type not in _RETURN_TYPES:
            raise ValueError(f"return_type must be 'logits', 'loss', 'both' or None, got {return_type!r}")
        seqs, offsets, width, batched = self._sequences(input, prepend_bos, attention_mask, padding_side)
        B, V = len(seqs), self.config["vocab"]
        logits = np.zeros((B, 1 if last_only else width, V), dtype=np.float32)
        cache: Optional[Dict[str, np.ndarray]] = None if keep is None else {}
        nll, count = 0.0, 0
        for b, (ids, off) in enumerate(zip(seqs, offsets)):
            one: Optional[Dict[str, np.ndarray]] = None if keep is None else {}
            lg, _ = self._hooked(ids, hooks, None if one is None else (keep, one), last_only, kernel)
            if last_only:
                logits[b] = lg[0]
            else:
                logits[b, off:off + ids.size] = lg[0]
                if return_type in ("loss", "both") and ids.size > 1:
                    row = lg[0, :-1].astype(np.float64)
                    top = row.max(-1, keepdims=True)
                    lse = np.log(np.exp(row - top).sum(-1)) + top[:, 0]
                    nll += float((lse - row[np.arange(ids.size - 1), ids[1:]]).sum())
                    count += ids.size - 1
            if one is not None:
                for name, t in one.items():
                    _place(cache, name, t, b, off, B, width, batched)
        if bwd is not None:
            if last_only:
                raise ValueError("gradients need every position's logits: last_only=False")
            self._backward(seqs, offsets, hooks, logits, bwd, cache, B, width, batched)
        if return_type in ("loss", "both"):
            if last_only:
                raise ValueError("return_type='loss' needs every position's logits: last_only=False")
            loss = nll / count if count else float("nan")
        out = {"logits": logits, "loss": loss if return_type in ("loss", "both") else None,
               None: None}.get(return_type) if return_type != "both" else (logits, loss)
        return out, None if cache is None else ActivationCache(cache, self)

    def _backward(self, seqs, offsets, hooks, logits, bwd, cache, B, width, batched):
        """The gradient of the metric at the hook points (attn_decoder_backward,
        once per sequence): bwd_hooks called with each gradient (batch axis 1),
        and <name>_grad cached for the names grad_keep keeps."""
        bwd_hooks, grad_keep, metric = bwd
        dlogits = _metric_gradient(metric, logits, seqs, offsets)
        n_layers = self.config["n_layers"]
        grad_points = 0
        for where, fn in bwd_hooks:
            if not callable(fn):
                raise TypeError(f"bwd_hooks: {fn!r} is not callable")
            if isinstance(where, str):
                point = _point_of(where, n_layers)
                if point is None:
                    raise ValueError(f"bwd_hooks: {where!r} is not a hook point of this model")
                grad_points |= 1 << point
            else:
                grad_points = _GRAD_POINTS
        if grad_keep is not None:
            for name in _core.hook_names(n_layers):
                if grad_keep(name) and (1 << _core.hook_parse(name)[0]) & _GRAD_POINTS:
                    grad_points |= 1 << _core.hook_parse(name)[0]
        grad_points &= _GRAD_POINTS
        for b, (ids, off) in enumerate(zip(seqs, offsets)):
            grads: Dict[str, np.ndarray] = {}
            dispatch, points = self._dispatcher(hooks, None)
            gdispatch, _ = self._dispatcher(list(bwd_hooks), None if grad_keep is None else (grad_keep, grads))
            own = np.empty((ids.size, self.config["vocab"]), dtype=np.float32)
            _core.model_backward(self._handle, ids, np.ascontiguousarray(dlogits[b, off:off + ids.size]), own, None,
                                 dispatch if points else None, points, gdispatch, grad_points)
            for name, t in grads.items():
                _place(cache, name + "_grad", t, b, off, B, width, batched)

    def _dispatcher(self, hooks, recording):
        """(dispatch, points): the tensor hook _core calls, and the hook points
        it needs, for fwd_hooks and an optional (keep, cache) recording."""
        points = 0
        for where, fn in hooks:
            if not callable(fn):
                raise TypeError(f"fwd_hooks: {fn!r} is not callable")
            if isinstance(where, str):
                point = _point_of(where, self.config["n_layers"])
                if point is None:
                    raise ValueError(f"fwd_hooks: {where!r} is not a hook point of this model "
                                     f"(Model.hook_names() lists them)")
                points |= 1 << point
            elif callable(where):
                points = _ALL_POINTS
            else:
                raise TypeError(f"fwd_hooks: a hook name or a name filter, got {where!r}")
        if recording is not None:
            # Only the points whose names are kept: hook_result and the
            # per-head inputs cost work of their own (attn_decoder.h).
            for name in _core.hook_names(self.config["n_layers"]):
                if recording[0](name):
                    points |= 1 << _core.hook_parse(name)[0]

        def dispatch(name, buf, shape):
            tensor = np.frombuffer(buf, dtype=np.float32).reshape((1,) + tuple(shape))
            touched = False
            for where, fn in hooks:
                if where == name if isinstance(where, str) else where(name):
                    result = fn(tensor, HookPoint(name))
                    touched = True
                    if result is not None:
                        result = np.asarray(result, dtype=np.float32)
                        if result.shape != tensor.shape:
                            raise ValueError(f"{name}: the hook returned shape {result.shape}, the point's is "
                                             f"{tensor.shape}")
                        tensor = np.ascontiguousarray(result)
            if recording is not None and recording[0](name):
                recording[1][name] = tensor.copy()
            return tensor if touched else None

        return dispatch, points

    def _hooked(self, tokens, hooks, recording, last_only, kernel):
        ids = self.tokenize(tokens) if isinstance(tokens, (str, bytes)) else self._ids(tokens)
        if ids.size == 0:
            raise ValueError("tokens: no tokens (a forward needs at least one)")
        if kernel not in _KERNELS:
            raise ValueError(f"kernel must be one of {sorted(_KERNELS)}, got {kernel!r}")
        dispatch, points = self._dispatcher(hooks, recording)
        c = self.config
        logits = np.empty((1 if last_only else ids.size, c["vocab"]), dtype=np.float32)
        _core.model_forward(self._handle, ids, logits, None, None, bool(last_only), _KERNELS[kernel],
                            dispatch if points else None, points)
        return logits[None], ids

    def top(self, logits: Any, k: int = 5) -> List[Tuple[int, str, float]]:
        """The k most likely next tokens of one row of logits [V]: (id, text,
        probability), the softmax computed in float64."""
        row = np.asarray(logits, dtype=np.float64).reshape(-1)
        if row.size != self.config["vocab"]:
            raise ValueError(f"logits: {row.size} values for a vocabulary of {self.config['vocab']}")
        k = max(1, min(int(k), row.size))
        probs = np.exp(row - row.max())
        probs /= probs.sum()
        best = np.argsort(-row, kind="stable")[:k]
        return [(int(i), self.detokenize([i]), float(probs[i])) for i in best]

    # ----------------------------------------------------------- generation

    def session(self, capacity: int = 4096, *, kv_dtype: str = "float32", kernel: str = "auto") -> "Session":
        """A decoding session over attn's KV cache (attn_decoder_session):
        capacity positions allocated now, kv_dtype "float32" (reproduces the
        full forward), "float16" or "bfloat16" (half the memory), "q8_0" or
        "fp8" (8-bit blocks of 32 values with a float16 scale, quantized on
        append: 0.27x the memory of float32; head_dim a multiple of 32;
        docs/cache.md, "8-bit caches"), or "KEYS:VALUES" for each its own
        ("bfloat16:q8_0": the keys' outliers kept at 16 bits, the values at
        8; llama.cpp's -ctk / -ctv)."""
        return Session(self, capacity, kv_dtype, kernel)

    def end_ids(self) -> Tuple[int, ...]:
        """The ids that end a generated text (EOS and the end-of-turn tokens
        the vocabulary has; attn_tokenizer_end_ids)."""
        return tuple(_core.model_end_ids(self._handle))

    def generate(self, prompt: Union[str, bytes, Sequence[int], np.ndarray], *, max_tokens: int = 64,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                 repetition_penalty: float = 1.0, frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 penalty_last_n: int = 0, seed: int = 0, stop_at_eos: bool = True, kv_dtype: str = "float32",
                 stream: bool = False):
        """Continues prompt by up to max_tokens tokens through the KV cache:
        the prompt in one step, then one token a step.  Greedy by default
        (temperature 0: the largest logit, the lowest id among equals);
        otherwise temperature, top_k, top_p and min_p in transformers' order,
        drawn with attn's seeded SplitMix64 sampler — the same tokens as
        `attn model generate` with the same options.  The penalties
        (repetition as transformers', frequency and presence as OpenAI's and
        llama.cpp's) count the prompt and the tokens generated, the last
        penalty_last_n of them (0: all; attn_decoder.h, "sampling").  Stops
        after an end token (which is returned) unless stop_at_eos=False.

        Returns the new ids (int32 [n]); with stream=True an iterator that
        yields each id as it is computed."""
        ids = self.tokenize(prompt) if isinstance(prompt, (str, bytes)) else self._ids(prompt)
        tokens = self._tokens(ids, max_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
                              frequency_penalty, presence_penalty, penalty_last_n, seed, stop_at_eos, kv_dtype)
        if stream:
            return tokens
        return np.array(list(tokens), dtype=np.int32)

    def _tokens(self, ids, max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, frequency_penalty,
                presence_penalty, penalty_last_n, seed, stop_at_eos, kv_dtype):
        """The generated ids, one at a time (generate's and chat's loop)."""
        if ids.size == 0:
            raise ValueError("prompt: no tokens (generation needs at least one)")
        max_tokens = int(max_tokens)
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        sampler = _core.sampler_new(float(temperature), int(top_k), float(top_p),
                                    int(seed) & 0xFFFFFFFFFFFFFFFF, self.config["vocab"], float(min_p),
                                    float(repetition_penalty), float(frequency_penalty), float(presence_penalty),
                                    int(penalty_last_n))
        _core.sampler_accept(sampler, ids)
        session = self.session(ids.size + max_tokens, kv_dtype=kv_dtype)
        ends = set(self.end_ids()) if stop_at_eos and self.config["tokenizer"] else set()

        def tokens():
            logits = session.step(ids)
            for _ in range(max_tokens):
                token = int(_core.sampler_sample(sampler, logits))
                yield token
                if token in ends or session.position == session.capacity:
                    return
                logits = session.step([token])

        return tokens()

    def chat_prompt(self, messages: Sequence[Dict[str, Any]], *, add_generation_prompt: bool = True,
                    template: Optional[str] = None, **variables: Any) -> str:
        """The text the model is given for a conversation: its own chat
        template (tokenizer.chat_template of a GGUF file, chat_template of a
        checkpoint's tokenizer_config.json), or template, rendered over
        messages ([{"role": ..., "content": ...}]) as transformers'
        apply_chat_template(messages, add_generation_prompt=...,
        tokenize=False) renders it (attn_chat.h); variables are more of the
        template's (enable_thinking=False, tools=[...], ...)."""
        return _core.model_chat_prompt(self._handle, json.dumps(list(messages), ensure_ascii=False),
                                       bool(add_generation_prompt),
                                       json.dumps(variables, ensure_ascii=False) if variables else None, template)

    def chat(self, messages: Sequence[Dict[str, Any]], *, max_tokens: int = 512, temperature: float = 0.0,
             top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, repetition_penalty: float = 1.0,
             frequency_penalty: float = 0.0, presence_penalty: float = 0.0, penalty_last_n: int = 0, seed: int = 0,
             stop: Union[str, Sequence[str], None] = None, template: Optional[str] = None,
             kv_dtype: str = "float32", **variables: Any) -> str:
        """The model's reply to a conversation, as text: the prompt is
        chat_prompt(messages) (the model's own template, with the generation
        prompt), tokenized as transformers' apply_chat_template(tokenize=True)
        does (the template writes the special tokens: no BOS is added); the
        reply is generated as generate's options say and ends at an end
        token (not included), at max_tokens, or before the first of the stop
        strings.  `attn model chat --messages FILE.json` gives the same
        reply for the same options."""
        prompt = self.chat_prompt(messages, template=template, **variables)
        ids = self.tokenize(prompt, add_bos=False)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        ends = set(self.end_ids())
        reply: List[int] = []
        for token in self._tokens(ids, max_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
                                  frequency_penalty, presence_penalty, penalty_last_n, seed, True, kv_dtype):
            if token in ends:
                break
            reply.append(token)
            if stops:
                text = self.detokenize(reply)
                cut = min((text.find(s) for s in stops if s and s in text), default=-1)
                if cut >= 0:
                    return text[:cut]
        return self.detokenize(reply)


class Session:
    """One sequence decoded step by step over attn's KV cache: each step
    runs its tokens at the next positions and returns the last one's logits
    [V].  Steps of any sizes give the full forward's logits to float
    rounding.  Not for several threads at once (distinct sessions are)."""

    def __init__(self, model: Model, capacity: int, kv_dtype: str = "float32", kernel: str = "auto") -> None:
        keys, _, values = kv_dtype.partition(":")  # "bfloat16:q8_0": keys and values apart
        for name in (keys, values) if values else (keys,):
            if name not in _KV_DTYPES:
                raise ValueError(f"kv_dtype must be one of {sorted(_KV_DTYPES)}, or KEYS:VALUES of two of them "
                                 f"(\"bfloat16:q8_0\"), got {kv_dtype!r}")
        if values and _KV_DTYPES[values] == _core.F32 and _KV_DTYPES[keys] != _core.F32:
            raise ValueError(f"kv_dtype {kv_dtype!r}: float32 values beside narrower keys is the one mix a cache "
                             "does not take")
        if kernel not in _KERNELS:
            raise ValueError(f"kernel must be one of {sorted(_KERNELS)}, got {kernel!r}")
        self.model = model
        self._session = _core.session_new(model._handle, int(capacity), _KV_DTYPES[keys], _KERNELS[kernel],
                                          _KV_DTYPES[values] if values else 0)

    @property
    def position(self) -> int:
        """Tokens the session holds."""
        return _core.session_state(self._session)[0]

    @property
    def capacity(self) -> int:
        return _core.session_state(self._session)[1]

    def step(self, tokens: Union[str, bytes, Sequence[int], np.ndarray], *,
             fwd_hooks: Sequence[Tuple[Union[str, Callable[[str], bool]], Callable]] = (),
             names_filter: Any = False) -> Any:
        """Runs tokens (a text is tokenized, with BOS where the model adds it)
        at the next positions; the logits of the last one, float32 [V].

        fwd_hooks as Model.run_with_hooks, and names_filter (None = every
        point, a name, names or a predicate) to also return a cache as
        Model.run_with_cache does: (logits, cache).  On a step the tensors
        cover its n tokens at positions pos .. pos + n - 1, and
        hook_attn_scores / hook_pattern are [1, Hq, n, pos + n]: the step's
        queries over every key the session holds (the full forward's rows
        for those positions).  Hooks on scores, pattern or z make the step
        attend over a copy of the cache (slower; the logits agree with the
        unhooked step to float rounding)."""
        ids = self.model.tokenize(tokens) if isinstance(tokens, (str, bytes)) else self.model._ids(tokens)
        if ids.size == 0:
            raise ValueError("tokens: no tokens (a step needs at least one)")
        logits = np.empty(self.model.config["vocab"], dtype=np.float32)
        hooks = list(fwd_hooks)
        cache: Optional[Dict[str, np.ndarray]] = None if names_filter is False else {}
        if hooks or cache is not None:
            recording = None if cache is None else (Model._keep(names_filter), cache)
            dispatch, points = self.model._dispatcher(hooks, recording)
            _core.session_step(self._session, ids, logits, dispatch, points)
        else:
            _core.session_step(self._session, ids, logits)
        return logits if cache is None else (logits, cache)

    def reset(self) -> None:
        """Empties the session (its memory is kept)."""
        _core.session_reset(self._session)
