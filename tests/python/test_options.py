"""The attention options: libattn's table of attn_sdpa_options is the one
description of them (attn_sdpa_option).  Here: the stub (attn/__init__.pyi)
and the functions' signatures name exactly its keywords, and the keywords
Python gained from it (align, query_start, key_start, total_len_q,
total_len_kv, precision; the score stage in mha_forward) compute what the
float64 reference of docs/semantics.md says, and what the attn program
computes for the same flags when it is built beside the package."""

import ast
import inspect
import os
import pathlib
import subprocess

import numpy as np
import pytest

import attn
from conftest import ATOL, RTOL, rand, reference

ATTENTION_CALLS = ("sdpa", "sdpa_backward", "trace", "paths", "mha_forward", "mha_backward")


def table_keywords():
    """The Python keywords of the table's rows, in its order, with their defaults."""
    keywords = {}
    for row in attn._core.sdpa_options():
        if row["python"] and row["python"] not in keywords:
            keywords[row["python"]] = ast.literal_eval(row["python_default"])
    return keywords


def stub():
    return ast.parse(pathlib.Path(attn.__file__).with_name("__init__.pyi").read_text())


def test_the_stub_lists_the_tables_keywords():
    classes = [n for n in stub().body if isinstance(n, ast.ClassDef) and n.name == "AttentionOptions"]
    assert len(classes) == 1, "attn/__init__.pyi has no class AttentionOptions"
    listed = [n.target.id for n in classes[0].body if isinstance(n, ast.AnnAssign)]
    assert listed == list(table_keywords()), (
        "attn/__init__.pyi's AttentionOptions must list the keywords of libattn's options table "
        "(src/base/options.c), in its order")


def literal_names(annotation, aliases):
    """The strings of the Literal[...]s an annotation names, through the
    stub's aliases (Kernel = Literal[...]), in order."""
    names = []
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id in aliases:
            names += literal_names(aliases[node.id], aliases)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.append(node.value)
    return names


def test_the_stubs_choices_are_the_tables():
    """A choice's keyword (kernel, align, precision) is typed with exactly
    its row's names, and causal takes the alignments' names: a name added
    to the table is added to the stub."""
    module = stub()
    aliases = {n.targets[0].id: n.value for n in module.body
               if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}
    options = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "AttentionOptions")
    typed = {n.target.id: n.annotation for n in options.body if isinstance(n, ast.AnnAssign)}
    rows = {row["python"]: row for row in attn._core.sdpa_options() if row["python"]}
    checked = 0
    for keyword, row in rows.items():
        if row["kind"] == "choice":
            assert literal_names(typed[keyword], aliases) == list(row["choices"]), keyword
            checked += 1
    assert checked >= 3
    assert literal_names(typed["causal"], aliases) == list(rows["align"]["choices"])


def test_every_attention_call_takes_the_options_in_the_stub():
    defs = [n for n in stub().body if isinstance(n, ast.FunctionDef) and n.name in ATTENTION_CALLS]
    assert {d.name for d in defs} == set(ATTENTION_CALLS)
    for d in defs:
        kwarg = d.args.kwarg
        assert kwarg is not None and ast.unparse(kwarg.annotation) == "Unpack[AttentionOptions]", d.name
        own = {a.arg for a in d.args.kwonlyargs}
        assert not own & set(table_keywords()), f"{d.name} lists an option of its own in the stub"


def test_every_attention_call_shows_the_options_in_its_signature():
    keywords = table_keywords()
    for name in ATTENTION_CALLS:
        params = inspect.signature(getattr(attn, name)).parameters
        shown = {p.name: p.default for p in params.values() if p.name in keywords}
        assert shown == keywords, name
        assert all(params[k].kind == inspect.Parameter.KEYWORD_ONLY for k in keywords)
    assert all(k in attn.sdpa.__doc__ for k in keywords), "attn.sdpa's docstring must document every option"


def test_an_unknown_keyword_is_refused_as_python_would(rng):
    q = rand(rng, 3, 4)
    with pytest.raises(TypeError, match="sdpa\\(\\) got an unexpected keyword argument 'casual'"):
        attn.sdpa(q, q, q, casual=True)


def test_query_start_places_a_chunk_of_rows(rng):
    """Rows [4, 9) of a causal lower-right call over all keys, computed
    alone with query_start and total_len_q, are those rows of the whole."""
    b, l, s, hq, hkv, d = 2, 11, 15, 4, 2, 8
    q, k, v = rand(rng, b, l, hq, d), rand(rng, b, s, hkv, d), rand(rng, b, s, hkv, d)
    whole = reference(q, k, v, causal=True, align="lower-right")[0]
    chunk = attn.sdpa(q[:, 4:9], k, v, causal="lower-right", query_start=4, total_len_q=l)
    np.testing.assert_allclose(chunk, whole[:, 4:9], rtol=RTOL, atol=ATOL)


def test_key_start_places_a_slice_of_keys(rng):
    """Keys [5, 12) of a sequence of 12, causal top-left: key j of the slice
    is position 5 + j, visible to query i when 5 + j <= i."""
    b, l, hq, d = 1, 12, 2, 4
    q, k, v = rand(rng, b, l, hq, d), rand(rng, b, 7, hq, d), rand(rng, b, 7, hq, d)
    visible = (np.arange(7)[None, :] + 5) <= np.arange(l)[:, None]
    want = reference(q, k, v, mask=visible)[0]
    got = attn.sdpa(q, k, v, causal=True, key_start=5, total_len_kv=12)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_align_places_the_window_without_causal(rng):
    q, k, v = rand(rng, 1, 5, 2, 8), rand(rng, 1, 9, 2, 8), rand(rng, 1, 9, 2, 8)
    want = reference(q, k, v, window=(2, 1), align="lower-right")[0]
    np.testing.assert_allclose(attn.sdpa(q, k, v, window=(2, 1), align="lower-right"), want, rtol=RTOL, atol=ATOL)
    # causal=True follows align; a causal alignment align contradicts is refused
    np.testing.assert_array_equal(attn.sdpa(q, k, v, causal=True, align="lower-right"),
                                  attn.sdpa(q, k, v, causal="lower-right"))
    with pytest.raises(ValueError, match="align"):
        attn.sdpa(q, k, v, causal="lower-right", align="top-left")
    with pytest.raises(ValueError, match="align must be"):
        attn.sdpa(q, k, v, align="bottom")


def test_precision(rng):
    """exact is the default, bit for bit; fast stays within bfloat16's
    rounding (8 significant bits) of the float64 reference."""
    q, k, v = (rand(rng, 1, 40, 2, 32, dtype=np.float16) for _ in range(3))
    exact = attn.sdpa(q, k, v, causal=True)
    np.testing.assert_array_equal(attn.sdpa(q, k, v, causal=True, precision="exact"), exact)
    fast = attn.sdpa(q, k, v, causal=True, precision="fast")
    ro = reference(q, k, v, causal=True)[0]
    np.testing.assert_allclose(fast.astype(np.float64), ro, rtol=0, atol=2.0**-5)
    with pytest.raises(ValueError, match="precision must be 'exact' or 'fast'"):
        attn.sdpa(q, k, v, precision="half")
    with pytest.raises(ValueError, match="query_start must be >= 0"):
        attn.sdpa(q, k, v, query_start=-1)


def test_mha_takes_the_score_stage(rng):
    """mha_forward with sinks and ALiBi is its projections around attn.sdpa
    with the same options."""
    d_model, hq, d = 6, 2, 3
    x = rand(rng, 1, 5, d_model)
    w = {n: rand(rng, d_model, hq * d) for n in ("wq", "wk", "wv")}
    sinks = rand(rng, hq)
    out = attn.mha_forward(x, heads=hq, causal=True, sinks=sinks, alibi=True, softcap=5.0, **w)
    q, k, v = ((x @ w[n]).reshape(1, 5, hq, d) for n in ("wq", "wk", "wv"))
    z = attn.sdpa(q, k, v, causal=True, sinks=sinks, alibi=True, softcap=5.0)
    np.testing.assert_allclose(out, z.reshape(1, 5, hq * d), rtol=1e-5, atol=1e-5)


def cli():
    """The attn program of the same tree, when it is built ($ATTN_CLI, else build/attn)."""
    path = os.environ.get("ATTN_CLI") or str(pathlib.Path(__file__).resolve().parents[2] / "build" / "attn")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no attn program at {path} (set ATTN_CLI): the comparisons with it skip")
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    if attn.__version__ not in version:
        pytest.skip(f"{path} is not this package's version ({version.strip()} vs {attn.__version__})")
    return path


@pytest.mark.parametrize("flags, options", [
    (["--precision", "fast", "--causal"], dict(precision="fast", causal=True)),
    (["--window", "2,1", "--align", "lower-right"], dict(window=(2, 1), align="lower-right")),
    (["--softcap", "3", "--alibi"], dict(softcap=3.0, alibi=True)),
])
def test_the_same_flags_in_the_attn_program(tmp_path, rng, flags, options):
    program = cli()
    q, k, v = rand(rng, 1, 33, 4, 32, dtype=np.float16), rand(rng, 1, 40, 2, 32, dtype=np.float16), \
        rand(rng, 1, 40, 2, 32, dtype=np.float16)
    for name, a in (("q", q), ("k", k), ("v", v)):
        np.save(tmp_path / f"{name}.npy", a)
    out = tmp_path / "o.npy"
    subprocess.run([program, "sdpa", "-q", str(tmp_path / "q.npy"), "-k", str(tmp_path / "k.npy"), "-v",
                    str(tmp_path / "v.npy"), "-o", str(out), "--quiet", *flags], check=True)
    mine = np.empty((1, 33, 4, 32), dtype=np.float32)  # the program writes float32 (--out-dtype f32)
    attn.sdpa(q, k, v, out=mine, **options)
    np.testing.assert_array_equal(np.load(out), mine)
