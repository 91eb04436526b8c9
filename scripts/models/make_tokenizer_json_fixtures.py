#!/usr/bin/env python3
"""make_tokenizer_json_fixtures.py -- tokenizer.json fixtures and their reference ids.

    python3 scripts/models/make_tokenizer_json_fixtures.py [--models DIR] [--out DIR]

Writes, into tests/fixtures/tokenizer/:

  qwen2.5-coder-0.5b.tokenizer.json.gz   the real Qwen2.5 tokenizer.json, as
        transformers saves the tokenizer it builds from the GGUF
        (AutoTokenizer.from_pretrained(DIR, gguf_file=...).save_pretrained);
        its ids are those of qwen2.5-coder-0.5b.txt (the same tokenizer)
  smollm2-135m.tokenizer.json.gz   the same for SmolLM2 (ids: smollm2-135m.txt)
  (Gemma 3's, made the same way, is 5.4 MB gzipped: not committed; with
  --gemma-json DIR it is written to DIR/tokenizer.json for a check by hand,
  docs/tokenizers.md §9)
  tiny-qwen2.tokenizer.json   a small byte-level BPE trained here with the
        `tokenizers` library (Qwen2's Split pattern + ByteLevel, 400 merges,
        merges written as [a, b] pairs, special and non-special added tokens)
  tiny-gpt2.tokenizer.json    the same with GPT-2's pre-tokenizer
        (ByteLevel use_regex=true) and merges written as "a b" strings, and
        two special tokens taking white space: <mask> (lstrip), <sep> (rstrip)
  tiny-gemma.tokenizer.json   Gemma's shape of tokenizer.json: a BPE trained
        here on U+2581-spelled text (normalizer Replace " " -> U+2581,
        pre-tokenizer Split " " MergedWithPrevious), 200 characters at most
        in its alphabet, the 256 <0xNN> byte tokens (byte_fallback), <unk>
        fused, <bos> by TemplateProcessing, Gemma's decoder; special tokens
        with lstrip (<mask>) and rstrip (<sep>), a normalized non-special one
  tiny-qwen2.txt, tiny-gpt2.txt, tiny-gemma.txt   transformers' ids for make_tokenizer_fixtures'
        corpus on each (PreTrainedTokenizerFast(tokenizer_file=...)), in the
        format of the other fixtures
and tests/fixtures/tiny_models/qwen2/tokenizer.json: the tiny random
checkpoint's (vocabulary 256): the 256 byte letters, no merges, Qwen2's
pre-tokenizer, so that `attn model run DIR --text` runs on it.

Needs: transformers, tokenizers (and, for the Qwen file, gguf and torch).
"""
import argparse
import gzip
import json
import os
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from make_tokenizer_fixtures import CORPUS, NOSPECIAL  # noqa: E402

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
TRAIN = [t for t in CORPUS[:40]] * 3 + ["the quick brown fox; 苹果电脑; def f(x): return x"] * 20


def train(kind, path):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    if kind == "qwen2":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256 + 400, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(TRAIN, trainer)
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens(["<tool_call>", "</tool_call>"])
    if kind == "gpt2":
        from tokenizers import AddedToken
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True),
                                AddedToken("<sep>", rstrip=True, normalized=False, special=True)])
    tok.save(path)
    # transformers 5 writes merges as pairs, older ones as "a b": one of each.
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    merges = [m if isinstance(m, list) else m.split(" ") for m in d["model"]["merges"]]
    d["model"]["merges"] = merges if kind == "qwen2" else [" ".join(m) for m in merges]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False, indent=1)


def tiny_gemma(path):
    """Gemma's tokenizer.json shape (as transformers saves GemmaTokenizer), small."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    trainer = trainers.BpeTrainer(vocab_size=900, min_frequency=1, show_progress=False, limit_alphabet=200,
                                  special_tokens=[])
    tok.train_from_iterator(TRAIN, trainer)
    d = json.loads(tok.to_str())
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<sep>", "<start_of_turn>", "<end_of_turn>"]
    vocab = {}
    for piece in specials + [f"<0x{b:02X}>" for b in range(256)]:
        vocab[piece] = len(vocab)
    for piece, _ in sorted(d["model"]["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    tool = len(vocab)
    d["model"].update(vocab=vocab, byte_fallback=True, unk_token="<unk>", fuse_unk=True, dropout=None,
                      continuing_subword_prefix=None, end_of_word_suffix=None, ignore_merges=False)
    d["model"]["merges"] = [m if isinstance(m, list) else m.split(" ") for m in d["model"]["merges"]]
    d["added_tokens"] = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": t == "<mask>",
                          "rstrip": t == "<sep>", "normalized": False, "special": True} for t in specials]
    d["added_tokens"].append({"id": tool, "content": "<tool>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": True, "special": False})
    d["post_processor"] = {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<bos>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}}
    d["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False, indent=1)
    Tokenizer.from_file(path)  # tokenizers reads it back


def save_gguf_tokenizer_json(models_dir, gguf_name, out_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(models_dir, gguf_file=gguf_name)
    tok.save_pretrained(out_dir)
    return os.path.join(out_dir, "tokenizer.json")


def write_ids(tok_path, out_path, title):
    import tokenizers
    import transformers
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=tok_path)
    lines = [f"# {title}: reference ids from transformers {transformers.__version__}, "
             f"tokenizers {tokenizers.__version__}",
             "# written by scripts/models/make_tokenizer_json_fixtures.py; do not edit"]
    for text in CORPUS:
        for mode in ("special", "nospecial"):
            if mode == "nospecial" and text not in NOSPECIAL:
                continue
            ids = tok(text, split_special_tokens=(mode == "nospecial"))["input_ids"]
            decoded = tok.decode(ids, skip_special_tokens=True)
            lines += [f"case {mode}", "text " + text.encode("utf-8").hex(),
                      "ids " + " ".join(str(i) for i in ids), "decoded " + decoded.encode("utf-8").hex()]
    with open(out_path, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")


def tiny_model_tokenizer(path):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    letters = bytes_to_unicode()
    tok = Tokenizer(models.BPE(vocab={letters[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.save(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.environ.get("ATTN_MODEL_DIR",
                                                      os.path.expanduser("~/.cache/attn/models")))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "fixtures", "tokenizer"))
    ap.add_argument("--no-qwen", action="store_true", help="only the tiny tokenizers (no GGUF, no torch)")
    ap.add_argument("--gemma-json", metavar="DIR", help="also write Gemma 3's tokenizer.json (and its "
                    "tokenizer_config.json) into DIR, for a check by hand")
    args = ap.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    for kind in ("qwen2", "gpt2", "gemma"):
        path = os.path.join(args.out, f"tiny-{kind}.tokenizer.json")
        if kind == "gemma":
            tiny_gemma(path)
        else:
            train(kind, path)
        write_ids(path, os.path.join(args.out, f"tiny-{kind}.txt"), os.path.basename(path))
    tiny_model_tokenizer(os.path.join(here, "..", "..", "tests", "fixtures", "tiny_models", "qwen2", "tokenizer.json"))
    if not args.no_qwen:
        for gguf_name, out_name in (("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b"),
                                    ("smollm2-135m-instruct-q4_1.gguf", "smollm2-135m")):
            with tempfile.TemporaryDirectory() as tmp:
                with open(save_gguf_tokenizer_json(args.models, gguf_name, tmp), "rb") as f:
                    data = f.read()
            # mtime=0: the same bytes on every run
            with gzip.GzipFile(os.path.join(args.out, f"{out_name}.tokenizer.json.gz"), "wb", 9, mtime=0) as g:
                g.write(data)
    if args.gemma_json:
        save_gguf_tokenizer_json(args.models, "gemma-3-270m-q4_k_m.gguf", args.gemma_json)


if __name__ == "__main__":
    main()
