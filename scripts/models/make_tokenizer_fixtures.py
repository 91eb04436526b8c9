#!/usr/bin/env python3
"""make_tokenizer_fixtures.py -- the reference token ids of tests/model/test_tokenizer.c.

    python3 scripts/models/make_tokenizer_fixtures.py [--models DIR] [--out DIR]

Encodes one corpus (below) with Hugging Face `transformers` + `tokenizers`,
which build each model's tokenizer from its GGUF file offline
(AutoTokenizer.from_pretrained(DIR, gguf_file=NAME) with HF_HUB_OFFLINE=1),
and writes tests/fixtures/tokenizer/<model>.txt, one block per case:

    case special|nospecial            special tokens matched whole, or read as text
    text <hex of the UTF-8 text>      hex, so that tabs, CR and trailing blanks survive
    ids <id> <id> ...                 encode(text), with the BOS the model adds
    decoded <hex>                     decode(ids, skip_special_tokens=True)

The C test encodes every text and must produce the same ids, then decodes
them.  Needs: pip install transformers tokenizers gguf torch (transformers'
GGUF reader imports torch)
(the versions used are written at the top of each file).
"""
import argparse
import os
import sys

CORPUS = [
    "Hello, world!",
    "hello world",
    " Hello",
    "  two leading spaces",
    "trailing spaces   ",
    "a  b   c    d",
    "我吃了一个苹果",
    "这台电脑来自苹果",
    "苹果公司的电脑很贵。",
    "Tokenizers split text into pieces: 分词器把文本切成小块。",
    "日本語のテキストも少し。한국어도 조금.",
    "Ελληνικά και русский текст.",
    "emoji 😀 and 👍🏽 and a family 👨‍👩‍👧‍👦 and a flag 🇫🇷",
    "🧑🏿‍💻 writes code; ❤️ is two code points",
    "tabs\tand\ttabs\t\t\tmore",
    "line one\nline two\n\nline four\n",
    "windows\r\nline\r\nends\r\n",
    "mixed \t \n \r\n whitespace  \n\n\n  end",
    "\n\n\n\n",
    "    indented code",
    "def f(x):\n    return x * 2  # double\n",
    "for (int i = 0; i < n; i++) { a[i] += b[i]; }",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }",
    "SELECT * FROM users WHERE id = 7;",
    "numbers 1234567890 3.14159 -42 1e-9 0x1F",
    "12345678901234567890",
    "I'm sure you're right, we'll see; they've done it, he'd go, it's John's.",
    "IT'S LOUD AND WE'LL SHOUT",
    "don't can't won't",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text after",
    "<bos>a<eos>",
    "<start_of_turn>user\nhi<end_of_turn>\n",
    "<tool_call>{\"name\": \"f\"}</tool_call>",
    "<table><tr><td>cell</td></tr></table>",
    "[PAD151665] is an unused token",
    "<0x41> looks like a byte token",
    "\u2581 the space marker itself and ▁▁ two of them",
    "non-breaking\u00a0space, ideographic\u3000space, en\u2002space",
    "zero\u200bwidth and soft\u00adhyphen",
    "combining e\u0301 vs \u00e9, and ﬁ ligature",
    "long s \u017f and Kelvin \u212a",
    "control \x01\x02\x7f chars",
    "ＦＵＬＬＷＩＤＴＨ and ½ and ² and ٣",
    "a" * 64,
    "!!!!!!!!!!!!!!!!!!!!????????",
    "https://example.com/path?query=1&b=2#frag",
    "email@example.org, @user #hashtag $100 50% 3/4",
    "😀" * 5,
    "",
    " ",
    "x",
    "عربي עברית ไทย हिन्दी ქართული Հայերեն",
    "∀x∈ℝ: x² ≥ 0, ∑ᵢ aᵢ = π ≈ 3.14 → ∞",
    "next\u0085line, line\u2028separator, para\u2029separator, mongolian\u180evowel",
    "it'ſ and it'K (Kelvin) and IT'S",
    "a\x00nul byte inside",
    "The quick brown fox jumps over the lazy dog. " * 8,
    "大型语言模型的注意力机制：查询、键和值。每个词元都会关注之前的所有词元，" * 3,
]

# Deterministic random strings over blocks that stress the pre-tokenizer
# and the merges: ASCII letters, digits, punctuation and blanks, Latin with
# accents, combining marks, CJK, kana, Hangul, emoji and modifiers, ZWJ.
ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    " \t\n\r  ",
    "éèêëàâäôöûüçñßøåæœÉÀ",
    "\u0301\u0308\u0327\u0302",
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年苹果电脑",
    "あいうえおかきくけこアイウエオ",
    "가나다라마바사아자차카타파하",
    "😀😂🤖👍🏽👨\u200d👩\u200d👧🇫🇷❤️\ufe0f",
]


def random_texts(count, seed=1234):
    import random
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            alphabet = rng.choice(ALPHABETS)
            parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))))
        texts.append("".join(parts))
    return texts


CORPUS += random_texts(60)

# Added for SmolLM2 (whose vocabulary lacks 21 of the 256 byte letters:
# 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5..0xFF)
# after the texts above, so that the first fixtures' cases keep their
# order: control characters alone, between letters and punctuation (a
# dropped byte's neighbours merge), characters whose UTF-8 starts with
# 0xF1 or 0xF2, blanks before numbers (where GPT-2's split and llama.cpp's
# "smollm" one differ), more code, SmolLM2's special tokens, and random
# texts mixing all of it.
CORPUS += [
    "".join(chr(c) for c in range(32)) + "\x7f",
    "a\x04b",
    "!\x04!",
    "..\x06..",
    "=\x13=",
    "\x04\x04\x06\x13\x14\x16\x1d",
    " \x04",
    "x \x04\x06 y",
    "tab\x09vt\x0bff\x0cfs\x1cgs\x1drs\x1eus\x1f del\x7f esc\x1b[0m bell\x07",
    "plane five \U00050000 and nine \U00090000, a\U00060001b",
    "a  1, $100 and  2  3, ½ ½½, x 1",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n",
    "<repo_name>attn<file_sep>src/main.c<jupyter_code>print(1)<empty_output>",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "const f = async (a, b) => { await g(a ?? b); return `${a}-${b}`; };",
    "if [ -n \"$HOME\" ]; then echo \"$((1 + 2))\" | tee /tmp/x 2>&1; fi",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"中文\": \"值\"}}",
    "<div class=\"x\">&amp; &lt;tag&gt; &#x4e2d;</div>",
    "    for i in range(10):\n\t\tif i % 2 == 0:\r\n            yield i  # 注释",
    "混合 text 和 code: printf(\"%s\\n\", \"苹果\"); // 打印 🍎",
]

CONTROL_ALPHABETS = [
    "".join(chr(c) for c in range(32)) + "\x7f",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "abcxyz 0123 的苹果😀",
    "\U00050000\U00090000\u00bd\u00b2",
]


def random_control_texts(count, seed=4321):
    import random
    rng = random.Random(seed)
    return ["".join(rng.choice(rng.choice(CONTROL_ALPHABETS)) for _ in range(rng.randint(1, 24)))
            for _ in range(count)]


CORPUS += random_control_texts(30)

# Added tokens with lstrip / rstrip (the tiny tokenizer.json fixtures'
# <mask> and <sep>, make_tokenizer_json_fixtures.py): white space of every
# kind on either side, two in a row, at the ends.
CORPUS += [
    "a <mask> b  <mask>\t<sep>  c <sep>\n d",
    "<mask><mask>  <sep><sep>   end",
    " \u3000<mask>\u00a0x<sep>\u2028y\u0085<mask>",
    "   <sep>",
    "<mask>   ",
    "tool <tool> and<tool>x <tool>  ",
]

# Each text is encoded with special tokens matched and, for these, also
# with them read as plain text (split_special_tokens=True).
NOSPECIAL = {
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text after",
    "<bos>a<eos>",
    "<start_of_turn>user\nhi<end_of_turn>\n",
    "<tool_call>{\"name\": \"f\"}</tool_call>",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n",
    "<repo_name>attn<file_sep>src/main.c<jupyter_code>print(1)<empty_output>",
}

MODELS = [
    ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b.txt"),
    ("gemma-3-270m-q4_k_m.gguf", "gemma-3-270m.txt"),
    ("smollm2-135m-instruct-q4_1.gguf", "smollm2-135m.txt"),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.environ.get("ATTN_MODEL_DIR",
                                                      os.path.expanduser("~/.cache/attn/models")))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "fixtures", "tokenizer"))
    args = ap.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    os.makedirs(args.out, exist_ok=True)
    for gguf_name, out_name in MODELS:
        tok = AutoTokenizer.from_pretrained(args.models, gguf_file=gguf_name)
        lines = [
            f"# {gguf_name}: reference ids from transformers {transformers.__version__}, "
            f"tokenizers {tokenizers.__version__}",
            "# written by scripts/models/make_tokenizer_fixtures.py; do not edit",
        ]
        n_cases = n_ids = 0
        for text in CORPUS:
            for mode in ("special", "nospecial"):
                if mode == "nospecial" and text not in NOSPECIAL:
                    continue
                ids = tok(text, split_special_tokens=(mode == "nospecial"))["input_ids"]
                decoded = tok.decode(ids, skip_special_tokens=True)
                lines += [f"case {mode}", "text " + text.encode("utf-8").hex(),
                          "ids " + " ".join(str(i) for i in ids), "decoded " + decoded.encode("utf-8").hex()]
                n_cases += 1
                n_ids += len(ids)
        path = os.path.join(args.out, out_name)
        with open(path, "w", encoding="ascii") as f:
            f.write("\n".join(lines) + "\n")
        print(f"{path}: {n_cases} cases, {n_ids} ids", file=sys.stderr)


if __name__ == "__main__":
    main()
