"""attn.Model on the two real GGUF models (skipped, saying so, when
scripts/fetch-models.sh has not placed them in $ATTN_MODEL_DIR or
~/.cache/attn/models).

Against independent references only: Hugging Face's tokenizer ids
(tests/fixtures/tokenizer, made by scripts/models/make_tokenizer_fixtures.py)
and transformers' float32 eager forward of the same files
(tests/fixtures/decoder, scripts/models/make_decoder_fixtures.py), with the
tolerances tests/support/tolerances.h states for the C test of the same
decoder; plus what the mathematics guarantees of a causal attention map.
"""

import json
import os
import pathlib
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import attn

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
MODEL_DIR = pathlib.Path(os.environ.get("ATTN_MODEL_DIR", "~/.cache/attn/models")).expanduser()
FILES = {
    "qwen2": ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b.txt"),
    "gemma3": ("gemma-3-270m-q4_k_m.gguf", "gemma-3-270m.txt"),
}
# tests/support/tolerances.h: DECODER_HIDDEN_REL_FAIL (per-position rms),
# DECODER_WEIGHT_ABS_FAIL, DECODER_LOGIT_ABS_FAIL.
HIDDEN_REL = 1e-3
WEIGHT_ABS = 1e-3
LOGIT_ABS = 1e-3

_models = {}


def model(arch):
    path = MODEL_DIR / FILES[arch][0]
    if not path.exists():
        pytest.skip(f"{path} is absent: scripts/fetch-models.sh places it")
    if arch not in _models:
        _models[arch] = attn.Model(path)
    return _models[arch]


def tokenizer_cases(arch, limit=None):
    """(text bytes, ids, split_special) from the transformers fixture."""
    cases, case = [], None
    for line in (FIXTURES / "tokenizer" / FILES[arch][1]).read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, _, value = line.partition(" ")
        if key == "case":
            case = {"split": value.strip() != "special"}
        elif key == "text":
            case["text"] = bytes.fromhex(value.strip())
        elif key == "ids":
            case["ids"] = [int(x) for x in value.split()]
        elif key == "decoded":
            case["decoded"] = bytes.fromhex(value.strip()).decode("utf-8")
            cases.append(case)
    return cases[:limit]


@pytest.mark.parametrize("arch", ["qwen2", "gemma3"])
def test_tokenize_matches_transformers(arch):
    m = model(arch)
    cases = tokenizer_cases(arch)
    assert len(cases) > 50
    for case in cases:
        ids = m.tokenize(case["text"], split_special=case["split"])
        assert ids.dtype == np.int32
        assert ids.tolist() == case["ids"], case["text"]
        assert m.detokenize(ids, skip_special=True) == case["decoded"], case["text"]


@pytest.mark.parametrize("arch", ["qwen2", "gemma3"])
def test_config_is_the_files(arch):
    m = model(arch)
    c = m.config
    # The GQA layouts of the two files (docs/models.md; Qwen2.5-0.5B: 14 on 2,
    # Gemma 3 270M: 4 on 1), and the facts that follow from the architectures.
    want = {"qwen2": (24, 896, 14, 2, 64, 151936), "gemma3": (18, 640, 4, 1, 256, 262144)}[arch]
    assert (c["n_layers"], c["d_model"], c["n_heads"], c["n_kv_heads"], c["head_dim"], c["vocab"]) == want
    assert c["architecture"] == arch
    assert len(c["local_layers"]) == c["n_layers"]
    if arch == "gemma3":
        assert c["qk_norm"] and c["tied_embeddings"] and c["local_layers"][:6] == [True] * 5 + [False]
    else:
        assert c["qkv_bias"] and not any(c["local_layers"])
    assert arch in repr(m)


@pytest.mark.parametrize("arch", ["qwen2", "gemma3"])
@pytest.mark.parametrize("seq", ["zh", "en"])
def test_forward_matches_transformers(arch, seq):
    m = model(arch)
    ref = FIXTURES / "decoder" / arch

    def load(what):
        return np.load(ref / f"{seq}_{what}.npy")

    ids = load("ids")
    out = m.forward(ids, hidden=True, attention=load("attn_layers").tolist())
    L, N, d = ids.size, m.config["n_layers"], m.config["d_model"]
    assert out.logits.shape == (L, m.config["vocab"]) and out.hidden.shape == (N + 1, L, d)

    # The residual stream at the sliced dims, relative to each position's rms.
    norms, dims, sliced = load("hidden_norms"), load("hidden_dims"), load("hidden_slice")
    rms = norms / np.sqrt(d)
    diff = np.abs(out.hidden[:, :, dims].astype(np.float64) - sliced) / rms[:, :, None]
    assert diff.max() < HIDDEN_REL, diff.max()
    ours = np.linalg.norm(out.hidden.astype(np.float64), axis=2)
    assert np.abs(ours - norms).max() / norms.max() < HIDDEN_REL

    # Attention maps, absolute.
    for i, layer in enumerate(load("attn_layers")):
        assert np.abs(out.attention[int(layer)] - load("attn")[i]).max() < WEIGHT_ABS

    # Next tokens: HF's top logits at their ids, and the same top-1.
    top_ids, top_logits = load("top_ids"), load("top_logits")
    assert np.abs(np.take_along_axis(out.logits, top_ids, axis=1) - top_logits).max() < LOGIT_ABS * max(
        1.0, np.abs(top_logits).max())
    assert (out.logits.argmax(axis=1) == top_ids[:, 0]).all()


def test_attention_maps_are_causal_softmaxes():
    m = model("gemma3")
    out = m.forward("The capital of France is Paris, and the capital of Italy is", attention=True)
    L = out.ids.size
    upper = np.triu(np.ones((L, L), dtype=bool), 1)
    for layer, w in out.attention.items():
        assert w.shape == (m.config["n_heads"], L, L)
        assert (w[:, upper] == 0).all(), layer
        np.testing.assert_allclose(w.sum(axis=2, dtype=np.float64), 1.0, atol=1e-5)
    # Gemma's local layers see a window: row i has no weight before i - W + 1
    # (the window is larger than this text, so only the shape is checked here).
    assert m.config["sliding_window"] > L


def test_last_only_and_run_with_cache_agree_with_the_full_forward():
    m = model("gemma3")
    ids = m.tokenize("我吃了一个苹果")
    full = m.forward(ids, hidden=True, attention=True)
    last = m.forward(ids, last_only=True)
    assert last.logits.shape == (1, m.config["vocab"])
    # The last row computed alone: the same to float rounding, not bit for bit
    # (OpenBLAS picks other kernels for a 1-row product; docs/kernels.md §7).
    assert np.abs(last.logits[0] - full.logits[-1]).max() <= 1e-5 * np.abs(full.logits).max()
    logits, cache = m.run_with_cache(ids)
    np.testing.assert_array_equal(logits[0], full.logits)
    N = m.config["n_layers"]
    for layer in range(N):
        np.testing.assert_array_equal(cache[f"blocks.{layer}.hook_resid_post"][0], full.hidden[layer + 1])
        np.testing.assert_array_equal(cache[f"blocks.{layer}.attn.hook_pattern"][0], full.attention[layer])
    np.testing.assert_array_equal(cache["hook_embed"][0], full.hidden[0])
    # The top tokens are a softmax of the logits: probabilities in (0, 1], descending.
    top = m.top(full.logits[-1], 5)
    probs = [p for _, _, p in top]
    assert probs == sorted(probs, reverse=True) and 0 < probs[-1] <= probs[0] <= 1
    assert top[0][0] == int(full.logits[-1].argmax())


def test_reference_kernel_agrees():
    m = model("gemma3")
    ids = m.tokenize("Attention is all you need")
    flash = m.forward(ids, attention=[0, 5])
    ref = m.forward(ids, attention=[0, 5], kernel="ref")
    for layer in (0, 5):
        assert np.abs(flash.attention[layer] - ref.attention[layer]).max() < 1e-5
    assert np.abs(flash.logits - ref.logits).max() < LOGIT_ABS * np.abs(ref.logits).max()


def test_detokenize_and_pieces():
    m = model("qwen2")
    text = "这台电脑来自苹果 and an apple"
    ids = m.tokenize(text)
    assert m.detokenize(ids) == text
    assert "".join(m.to_str_tokens(ids)).replace("\ufffd", "") != "" 
    apple = m.tokenize("苹果").tolist()
    assert len(apple) == 1 and apple[0] in ids.tolist()  # 苹果 is one token
    assert m.find_token(m.token_piece(apple[0])) == apple[0]
    assert m.find_token("no such piece \x00") == -1
    # A token split inside a character: replaced, or refused when strict.
    emoji = m.tokenize("🍎").tolist()
    if len(emoji) > 1:
        assert "\ufffd" in m.detokenize(emoji[:1])
        with pytest.raises(UnicodeDecodeError):
            m.detokenize(emoji[:1], errors="strict")


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(attn.FileError, match="no-such"):
        attn.Model(tmp_path / "no-such.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 5)
    with pytest.raises(attn.FormatError):
        attn.Model(bad)
    m = model("gemma3")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        m.forward([1, m.config["vocab"]])
    with pytest.raises(ValueError, match="no tokens"):
        m.forward(np.array([], dtype=np.int32))
    with pytest.raises(TypeError, match="integer"):
        m.forward(np.array([1.5, 2.0]))
    with pytest.raises(ValueError, match="layer 99"):
        m.forward([2, 3], attention=99)
    with pytest.raises(ValueError, match="kernel"):
        m.forward([2, 3], kernel="fast")


def test_threads_share_one_model():
    m = model("gemma3")
    texts = ["one two three", "我吃了一个苹果", "def f(x): return x"]
    serial = [m.forward(t, last_only=True).logits for t in texts]
    results = [None] * len(texts)

    def run(i):
        results[i] = m.forward(texts[i], last_only=True).logits

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(serial, results):
        np.testing.assert_array_equal(a, b)  # same bits: attn's results do not depend on threads


def test_ctrl_c_stops_a_forward_between_layers():
    m = model("gemma3")
    ids = np.tile(m.tokenize("The quick brown fox jumps over the lazy dog. "), 12)  # ~130 tokens
    start = time.monotonic()
    m.forward(ids, last_only=True)
    whole = time.monotonic() - start
    timer = threading.Timer(whole / 4, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        m.forward(ids, last_only=True)
        time.sleep(whole)  # if the forward ended before the signal, it arrives here
    stopped = time.monotonic() - start
    timer.cancel()
    # The model is still usable, and the forward did not run to its end
    # (generously: the machine is shared and a layer is ~1/18 of the time).
    assert m.forward(ids[:8], last_only=True).logits.shape == (1, m.config["vocab"])
    assert stopped < whole * 0.95 + 0.5, (stopped, whole)


def generate_cases(arch):
    """(key, prompt ids, transformers' greedy 20 new ids) from
    tests/fixtures/generate (scripts/models/make_generate_fixtures.py)."""
    cases = []
    for line in (FIXTURES / "generate" / f"{arch}.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, rest = line.split(" ", 1)
        prompt, new, _gap = rest.split("|")
        cases.append((key, [int(x) for x in prompt.split(",")], [int(x) for x in new.split(",")]))
    return cases


@pytest.mark.parametrize("arch", ["qwen2", "gemma3"])
def test_greedy_generation_is_transformers(arch):
    m = model(arch)
    cases = generate_cases(arch)
    assert len(cases) >= 3
    for key, prompt, want in cases[:2]:
        got = m.generate(prompt, max_tokens=len(want), stop_at_eos=False)
        assert got.dtype == np.int32 and got.tolist() == want, key
    # streamed: the same ids, one at a time
    key, prompt, want = cases[0]
    assert list(m.generate(prompt, max_tokens=5, stream=True)) == want[:5]


def test_session_step_hooks_see_the_full_forwards_rows():
    m = model("gemma3")
    c = m.config
    ids = m.tokenize("The capital of France is")
    pattern = lambda name: name.endswith("hook_pattern")
    _, full = m.run_with_cache(ids, names_filter=pattern)
    s = m.session(capacity=ids.size)
    s.step(ids[:-2])
    for i in (ids.size - 2, ids.size - 1):
        logits, cache = s.step(ids[i:i + 1], names_filter=pattern)
        assert sorted(cache) == sorted(f"blocks.{l}.attn.hook_pattern" for l in range(c["n_layers"]))
        for l in range(c["n_layers"]):
            p = cache[f"blocks.{l}.attn.hook_pattern"]
            assert p.shape == (1, c["n_heads"], 1, i + 1)  # the step's query over every key held
            np.testing.assert_allclose(p[0, :, 0, :], full[f"blocks.{l}.attn.hook_pattern"][0, :, i, :i + 1],
                                       atol=WEIGHT_ABS)
    # Patching on a step: head 0 of layer 3 reads nothing at the last position,
    # as the same hook does to the full forward's last row.
    def ablate(p, hook):
        p[0, 0, -1, :] = 0.0

    s2 = m.session(capacity=ids.size + 1)
    s2.step(ids[:-1])
    got = s2.step(ids[-1:], fwd_hooks=[("blocks.3.attn.hook_pattern", ablate)])
    want = m.run_with_hooks(ids, fwd_hooks=[("blocks.3.attn.hook_pattern", ablate)])[0, -1]
    plain = m.forward(ids).logits[-1]
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 2e-5 * scale
    assert np.abs(plain - want).max() > 100 * 2e-5 * scale  # the ablation did something

    def boom(t, hook):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        s2.step([2], fwd_hooks=[("blocks.0.hook_resid_pre", boom)])


def test_session_steps_equal_the_full_forward():
    m = model("gemma3")
    ids = m.tokenize("The capital of France is Paris, and the capital of Italy is")
    full = m.forward(ids).logits
    s = m.session(capacity=ids.size)
    got = [s.step(ids[:3])]
    for t in ids[3:]:
        got.append(s.step([t]))
    assert s.position == s.capacity == ids.size
    scale = np.abs(full).max()
    # tests/support/tolerances.h: a cached step's logits within 2e-5 of max |logit|
    for row, logits in zip([2] + list(range(3, ids.size)), got):
        assert np.abs(logits - full[row]).max() <= 2e-5 * scale
    with pytest.raises(attn.Error, match="capacity|holds"):
        s.step([2])
    s.reset()
    assert s.position == 0
    np.testing.assert_array_equal(s.step(ids[:3]), got[0])  # a reset session starts again, same bits
    half = m.session(capacity=ids.size, kv_dtype="float16")
    h = half.step(ids)
    assert np.abs(h - full[-1]).max() <= 2e-2 * scale and not np.array_equal(h, full[-1])
    for kv in ("q8_0", "fp8"):  # 8-bit caches: quantized on append, dequantized in the kernels
        eight = m.session(capacity=ids.size, kv_dtype=kv)
        e = eight.step(ids)
        assert np.abs(e - full[-1]).max() <= 5e-2 * scale and not np.array_equal(e, full[-1])
    # Keys and values each in their own dtype: float32 keys with bfloat16
    # values are the full forward with only hook_v rounded to bfloat16
    # (ml_dtypes' rounding, the independent side).
    import ml_dtypes

    def round_v(v, hook):
        return v.astype(ml_dtypes.bfloat16).astype(np.float32)

    want = m.run_with_hooks(ids, fwd_hooks=[(lambda name: name.endswith("attn.hook_v"), round_v)])[0, -1]
    split = m.session(capacity=ids.size, kv_dtype="float32:bfloat16").step(ids)
    assert np.abs(split - want).max() <= 2e-5 * scale
    assert np.abs(split - full[-1]).max() > 10 * np.abs(split - want).max()
    e = m.session(capacity=ids.size, kv_dtype="bfloat16:q8_0").step(ids)
    assert np.abs(e - full[-1]).max() <= 5e-2 * scale and not np.array_equal(e, full[-1])
    with pytest.raises(ValueError, match="float32 values beside narrower keys"):
        m.session(8, kv_dtype="q8_0:float32")


def test_sampling_is_seeded():
    m = model("gemma3")
    prompt = m.tokenize("Once upon a time")
    a = m.generate(prompt, max_tokens=8, temperature=1.0, top_p=0.9, seed=7, stop_at_eos=False)
    b = m.generate(prompt, max_tokens=8, temperature=1.0, top_p=0.9, seed=7, stop_at_eos=False)
    np.testing.assert_array_equal(a, b)
    greedy = m.generate(prompt, max_tokens=8, stop_at_eos=False)
    np.testing.assert_array_equal(m.generate(prompt, max_tokens=8, temperature=1.5, top_k=1, seed=3,
                                             stop_at_eos=False), greedy)
    assert m.config["eos_id"] in m.end_ids()
    with pytest.raises(attn.ArgumentError, match="top_p|temperature"):
        m.generate(prompt, max_tokens=2, temperature=-1.0)
    with pytest.raises(ValueError, match="kv_dtype"):
        m.session(8, kv_dtype="int8")


GEMMA_FRANCE = [2, 818, 5279, 529, 7001, 563]  # "The capital of France is" (tests/fixtures/trace)
GEMMA_ITALY = [2, 818, 5279, 529, 11702, 563]  # "... of Italy is": the same length


def test_run_with_cache_records_every_hook():
    m = model("gemma3")
    c = m.config
    L, N, Hq, Hkv, Dh, d = 6, c["n_layers"], c["n_heads"], c["n_kv_heads"], c["head_dim"], c["d_model"]
    logits, cache = m.run_with_cache(GEMMA_FRANCE)
    assert sorted(cache) == sorted(m.hook_names()) and len(cache) == 3 + 24 * N
    full = m.forward(GEMMA_FRANCE, hidden=True, attention=True)
    np.testing.assert_array_equal(logits[0], full.logits)  # recording changes nothing
    for layer in (0, N - 1):
        b = f"blocks.{layer}."
        assert cache[b + "attn.hook_q"].shape == (1, L, Hq, Dh)
        assert cache[b + "attn.hook_k"].shape == cache[b + "attn.hook_v"].shape == (1, L, Hkv, Dh)
        np.testing.assert_array_equal(cache[b + "attn.hook_pattern"][0], full.attention[layer])
        np.testing.assert_array_equal(cache[b + "hook_resid_post"][0], full.hidden[layer + 1])
        np.testing.assert_array_equal(cache[b + "hook_resid_mid"], cache[b + "hook_resid_pre"] + cache[b + "hook_attn_out"])
        # z is the pattern times v, head by head (GQA: query head h reads kv head h // (Hq / Hkv)), in float64
        p = cache[b + "attn.hook_pattern"][0].astype(np.float64)
        v = cache[b + "attn.hook_v"][0].astype(np.float64)
        z = np.einsum("hij,jhd->ihd", p, np.repeat(v, Hq // Hkv, axis=1))
        np.testing.assert_allclose(cache[b + "attn.hook_z"][0], z, rtol=1e-5, atol=1e-6)
    assert cache["ln_final.hook_normalized"].shape == (1, L, d)
    only = m.run_with_cache(GEMMA_FRANCE, names_filter=lambda n: n.endswith("hook_pattern"))[1]
    assert set(only) == {f"blocks.{l}.attn.hook_pattern" for l in range(N)}


def test_hooks_patch_and_ablate():
    m = model("gemma3")
    clean = m.forward(GEMMA_FRANCE).logits
    # A hook that writes back what it was given changes nothing, bit for bit.
    same = m.run_with_hooks(GEMMA_FRANCE, fwd_hooks=[(lambda name: True, lambda t, hook: t)])
    np.testing.assert_array_equal(same[0], clean)
    # The whole residual stream into layer 0 from the source run: the source's logits.
    _, source = m.run_with_cache(GEMMA_ITALY, names_filter="blocks.0.hook_resid_pre")

    def patch(t, hook):
        t[:] = source[hook.name]

    patched = m.run_with_hooks(GEMMA_FRANCE, fwd_hooks=[("blocks.0.hook_resid_pre", patch)])
    np.testing.assert_array_equal(patched[0], m.forward(GEMMA_ITALY).logits)
    # Zero-ablating one head's z against transformers with that head's o_proj
    # input zeroed (tests/fixtures/trace, scripts/models/make_trace_fixtures.py).
    trace = FIXTURES / "trace"
    for name, layer, head in (("L3H1", 3, 1), ("L5H0", 5, 0)):

        def ablate(t, hook, head=head):
            t[:, :, head, :] = 0
            return t

        logits = m.run_with_hooks(GEMMA_FRANCE, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", ablate)],
                                  last_only=True)[0, 0]
        ids, want = np.load(trace / f"gemma3_{name}_top_ids.npy"), np.load(trace / f"gemma3_{name}_top_logits.npy")
        assert np.abs(logits[ids] - want).max() < LOGIT_ABS
        assert logits.argmax() == ids[0]
    # Errors: an unknown point, a wrong shape returned, an exception raised in a hook.
    with pytest.raises(ValueError, match="not a hook point"):
        m.run_with_hooks(GEMMA_FRANCE, fwd_hooks=[("blocks.99.hook_resid_pre", patch)])
    with pytest.raises(ValueError, match="shape"):
        m.run_with_hooks(GEMMA_FRANCE, fwd_hooks=[("hook_embed", lambda t, hook: t[:, :2])])

    def boom(t, hook):
        raise RuntimeError("from the hook")

    with pytest.raises(RuntimeError, match="from the hook"):
        m.run_with_hooks(GEMMA_FRANCE, fwd_hooks=[("blocks.2.attn.hook_pattern", boom)])
    np.testing.assert_array_equal(m.forward(GEMMA_FRANCE).logits, clean)  # the model is unharmed


@pytest.mark.parametrize("name", ["qwen3", "qwen2", "gemma3", "llama"])
def test_hugging_face_checkpoints(name):
    """The tiny random checkpoints (tests/fixtures/tiny_models, safetensors +
    config.json; qwen3 sharded, qwen2 bfloat16, gemma3 float16) against
    transformers' float32 forward: 1e-5 of each tensor's largest magnitude,
    as tests/model/test_safetensors_models.c (TINY_MODEL_*_FAIL)."""
    path = FIXTURES / "tiny_models" / name
    m = attn.Model(path)
    assert m.config["architecture"] == name
    assert (m.config["tokenizer"] is None) == (name != "qwen2")  # qwen2's folder has a tokenizer.json
    for seq in ("a", "b"):
        ref = lambda what: np.load(path / "ref" / f"{seq}_{what}.npy")
        out = m.forward(ref("ids"), hidden=True, attention=True)
        for ours, theirs in ((out.logits, ref("logits")), (out.hidden, ref("hidden"))):
            assert np.abs(ours - theirs).max() <= 1e-5 * np.abs(theirs).max()
        attn_ref = ref("attn")
        for layer in range(m.config["n_layers"]):
            assert np.abs(out.attention[layer] - attn_ref[layer]).max() <= 1e-5
    greedy = m.generate(ref("ids"), max_tokens=4)  # ids in, ids out: no tokenizer needed
    assert greedy.size == 4 and greedy[0] == int(out.logits[-1].argmax())
    if name == "qwen2":
        # its tokenizer.json: the 256 byte letters, no merges (tests/fixtures/tiny_models)
        text = "héllo, 苹果"
        ids = m.tokenize(text)
        assert ids.size == len(text.encode("utf-8")) and m.detokenize(ids) == text
    else:
        with pytest.raises(attn.UnsupportedError, match="no tokenizer"):
            m.tokenize("hello")


# ------------------------------------------------------------------ chat

TINY_CHAT = FIXTURES / "chat" / "tiny-chat"


def test_chat_prompt_is_transformers_apply_chat_template():
    """The tiny checkpoint with Qwen2.5's template (tests/fixtures/chat/
    make_chat_model.py): the prompt ids are transformers' apply_chat_template
    (tokenize=True) ids, and the text is the template's."""
    m = attn.Model(TINY_CHAT)
    lines = (TINY_CHAT / "prompts.txt").read_text(encoding="utf-8").splitlines()
    pairs = zip([l for l in lines if l.startswith("messages ")], [l for l in lines if l.startswith("ids ")])
    for messages_line, ids_line in pairs:
        messages = json.loads(messages_line[len("messages "):])
        want = [int(i) for i in ids_line[len("ids "):].split(",")]
        prompt = m.chat_prompt(messages)
        assert prompt.endswith("<|im_start|>assistant\n")
        assert list(m.tokenize(prompt, add_bos=False)) == want
    assert m.chat_prompt([{"role": "user", "content": "hi"}], add_generation_prompt=False,
                         template="{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}") == "[user:hi]"
    with pytest.raises(attn.Error, match="the template raised an error: no"):
        m.chat_prompt([], template="{{ raise_exception('no') }}")


def test_chat_reply_is_the_command_line_s(tmp_path):
    """Model.chat gives the reply attn model chat --messages gives (greedy,
    and sampled with penalties and a seed)."""
    m = attn.Model(TINY_CHAT)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is 苹果?"}]
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    cli = os.environ.get("ATTN_CLI", str(ROOT / "build" / "attn"))
    if not os.path.exists(cli):
        pytest.skip(f"{cli} is not built")
    for options, flags in [({}, []),
                           ({"temperature": 0.9, "min_p": 0.05, "repetition_penalty": 1.3, "frequency_penalty": 0.2,
                             "seed": 11}, ["--temperature", "0.9", "--min-p", "0.05", "--repetition-penalty", "1.3",
                                           "--frequency-penalty", "0.2", "--seed", "11"])]:
        reply = m.chat(messages, max_tokens=12, **options)
        out = subprocess.run([cli, "model", "chat", "--model", str(TINY_CHAT), "--messages", str(path),
                              "--max-tokens", "12", *flags], capture_output=True, check=True, stdin=subprocess.DEVNULL)
        assert out.stdout.decode("utf-8") == reply + "\n"
    # A stop string from the reply's own text (not a U+FFFD, which stands
    # for bytes that never were that character, so never matches them).
    reply = m.chat(messages, max_tokens=12)  # greedy, as the stopped run below
    at = next(i for i in range(1, len(reply) - 2) if "\ufffd" not in reply[i:i + 3])
    stop = reply[at:at + 3]
    stopped = m.chat(messages, max_tokens=12, stop=stop)
    assert stopped == reply[:reply.index(stop)]


def test_weights_and_precision():
    """Model(weights=, precision=): the float32 twin and FAST beside the
    default (stored, exact).  FAST stays within docs/quant.md's bounds
    (tests/model/test_fast_model.c measures them over 52 texts)."""
    path = MODEL_DIR / FILES["gemma3"][0]
    if not path.exists():
        pytest.skip(f"{path} is absent: scripts/fetch-models.sh places it")
    stored = model("gemma3")
    f32 = attn.Model(path, weights="f32")
    fast = attn.Model(path, precision="fast")
    assert f32.config["weight_bytes"] > 3 * stored.config["weight_bytes"]
    exact = stored.forward(GEMMA_FRANCE).logits
    np.testing.assert_allclose(f32.forward(GEMMA_FRANCE).logits, exact, atol=LOGIT_ABS * 10, rtol=0)
    quick = fast.forward(GEMMA_FRANCE).logits
    assert (quick.argmax(-1) == exact.argmax(-1)).mean() >= 0.8
    with pytest.raises(ValueError, match="weights"):
        attn.Model(path, weights="int4")
    with pytest.raises(ValueError, match="precision"):
        attn.Model(path, precision="half")
