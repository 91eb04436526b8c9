#!/usr/bin/env python3
"""check_layers.py SOURCE_DIR [--objects OBJ|OBJ|...] [--nm NM] — the walls of src/.

Every #include "..." of src/ and tools/cli/ is read and checked against the
layer table below: a file may include headers of its own folder and of the
folders its line names, never of a folder above it.  Public headers
(include/) count as the folder that implements them (PUBLIC below); tools/cli/
may include public headers only (it is the CLI's shared parsing and
printing, over the API), and nothing of tools/ above it.  Then no two files
of src/ may include each other, directly or around a loop (a file's .c and
.h are one node).

With --objects (the libraries' object files; CTest passes them), the same
two rules are checked on what each object file calls: a call is an edge from
the caller's source file to the file that defines the symbol (read with nm).
An include graph cannot see a header that declares functions of several
files; the calls can.

Exit 0 when every rule holds, 1 naming each file that breaks one.  Python 3,
standard library only.
"""
import argparse
import collections
import fnmatch
import os
import re
import subprocess
import sys

# ---------------------------------------------------------------------------
# The layers, bottom first.  One line per folder of src/ (or a glob of files
# in it, matched against the path under src/; the first line that matches a
# file wins): the folders its files may include besides their own.  CORE
# stands for the folders of libattn's core, which form one layer and may
# include each other (the cycle check below keeps them from going round).
# To add a folder: a line here, placed at its layer.
CORE = "base api ref flash isa quant io rope cache interp machine chapter"
TABLE = """
base                -
api                 CORE
ref                 CORE
flash               CORE
isa                 CORE
quant               CORE
io                  CORE
rope                CORE
cache               CORE
interp/model*       CORE formats tokenizer model
interp              CORE
machine             CORE
chapter             CORE
formats             CORE
tokenizer           CORE formats
model               CORE formats tokenizer
viz                 CORE formats tokenizer model
dist                CORE formats tokenizer model
"""
# interp/model* (files src/interp/model*.c|h, or a folder src/interp/model/):
# interpretability over a whole model sits above model/, the rest of interp/
# in the core.

# The public headers and the folder that implements each; any other
# include/attn*.h is libattn's API, which every layer may see ("base").
PUBLIC = {
    "attn_gguf.h": "formats",
    "attn_model.h": "formats",
    "attn_npz.h": "formats",
    "attn_safetensors.h": "formats",
    "attn_tokenizer.h": "tokenizer",
    "attn_decoder.h": "model",
    "attn_chat.h": "model",
    "attn_model_interp.h": "interp/model*",
    "attn_viz.h": "viz",
    "attn_mpi.h": "dist",
}

# What breaks a rule today and is known, each with the reason: an include
# (the file, what it includes) or a cycle (its files, as the message names
# them).  An exception that no longer occurs fails too: delete its line.
EXCEPTIONS = {
}
# Known cycles of calls.  The object files depend on the build's options
# (the portable build compiles other ISA tables), so one missing here is not
# an error.
CALL_EXCEPTIONS = {
}
# ---------------------------------------------------------------------------

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def parse_table():
    core = CORE.split()
    rules = []
    for line in TABLE.strip().splitlines():
        pattern, *allowed = line.split()
        names = []
        for a in allowed:
            names += core if a == "CORE" else [] if a == "-" else [a]
        rules.append((pattern, set(names)))
    return rules


def folder_of(rel):
    """The table's folder for a path under src/ ('isa/x86_avx2/ukernels.c' -> 'isa')."""
    return rel.split("/", 1)[0]


def rule_of(rules, rel):
    """The first rule whose pattern matches the file rel (a path under src/)."""
    for pattern, allowed in rules:
        if "*" in pattern:
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel, pattern + "/*"):
                return pattern, allowed
        elif folder_of(rel) == pattern:
            return pattern, allowed
    return None, None


def layer_of(rules, rel):
    """What including rel (a path under src/) counts as: its rule's pattern
    when that is a glob (interp/model*), else its folder."""
    pattern, _ = rule_of(rules, rel)
    return pattern if pattern and "*" in pattern else folder_of(rel)


def resolve(root, including, name):
    """The file an #include "name" of the file `including` (a path from the
    root) means: ('src', path under src/), ('tools', path from the root),
    ('public', header name), or None (generated, or a system header)."""
    here = os.path.dirname(including)
    if "/" in name and os.path.isfile(os.path.join(root, "src", name)):
        return "src", name
    local = os.path.normpath(os.path.join(here, name))
    if os.path.isfile(os.path.join(root, local)):
        if local.startswith("src/"):
            return "src", local[4:]
        return "tools", local
    if os.path.isfile(os.path.join(root, "include", name)):
        return "public", name
    return None


def sources(root, top):
    for d, dirs, files in os.walk(os.path.join(root, top)):
        dirs.sort()
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(d, f), root)


def strongly_connected(edges):
    """Tarjan's components of more than one node, each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    nodes = sorted(set(edges) | {w for ws in edges.values() for w in ws})

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(1000, 4 * len(nodes)))
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def node(rel):
    """A file's node in the cycle check: its path without .c/.h."""
    return os.path.splitext(rel)[0]


def check_includes(root, rules, problems, used_exceptions):
    edges = collections.defaultdict(set)
    for path in list(sources(root, "src")) + list(sources(root, "tools/cli")):
        in_src = path.startswith("src/")
        rel = path[4:] if in_src else path
        if in_src:
            pattern, allowed = rule_of(rules, rel)
            if pattern is None:
                problems.append(f"{path}: its folder has no line in check_layers.py's table")
                continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(root, path, m.group(1))
                if target is None:
                    continue
                kind, name = target
                where = f'{path}:{number}: #include "{m.group(1)}"'
                if not in_src:  # tools/cli/: public headers and its own folder only
                    if kind == "src":
                        problems.append(f"{where}: tools/ uses the public headers only, not src/")
                    elif kind == "tools" and not name.startswith("tools/cli/"):
                        if (path, name) in EXCEPTIONS:
                            used_exceptions.add((path, name))
                        else:
                            problems.append(f"{where}: tools/cli/ is below the commands of tools/")
                    continue
                if kind == "tools":
                    problems.append(f"{where}: src/ includes nothing of tools/")
                    continue
                layer = PUBLIC.get(name, "base") if kind == "public" else layer_of(rules, name)
                if kind == "src" and node(name) != node(rel):
                    edges[node(rel)].add(node(name))
                if layer in (pattern, folder_of(rel)) or layer in allowed:
                    continue
                problems.append(f"{where}: {pattern}/ may not include {layer}/ (it is not below it)")
    for cycle in strongly_connected(edges):
        if tuple(cycle) in EXCEPTIONS:
            used_exceptions.add(tuple(cycle))
        else:
            problems.append("src/: a cycle of includes among " + ", ".join(cycle))


def object_source(obj):
    """src/-relative source of a CMake object file (.../NAME_objects.dir/formats/gguf.c.o)."""
    m = re.search(r"_objects\.dir/(.+)\.o$", obj.replace(os.sep, "/"))
    return m.group(1) if m else None


def check_calls(objects, nm, rules, problems):
    defined, undefined = {}, collections.defaultdict(set)
    for obj in objects:
        rel = object_source(obj)
        if rel is None:
            problems.append(f"{obj}: not an object of a src/ part")
            continue
        out = subprocess.run([nm, obj], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                undefined[rel].add(parts[1])
            elif len(parts) == 3 and parts[1] != "U" and parts[1].isupper():  # a global definition
                defined[parts[2]] = rel
    edges = collections.defaultdict(set)
    for rel, symbols in sorted(undefined.items()):
        pattern, allowed = rule_of(rules, rel)
        for symbol in sorted(symbols):
            callee = defined.get(symbol)
            if callee is None or callee == rel:
                continue
            edges[node(rel)].add(node(callee))
            layer = layer_of(rules, callee)
            if pattern is not None and layer not in (pattern, folder_of(rel)) and layer not in allowed:
                problems.append(f"src/{rel}: calls {symbol} of src/{callee}: {pattern}/ may not use {layer}/")
    for cycle in strongly_connected(edges):
        if tuple(cycle) not in CALL_EXCEPTIONS:
            problems.append("src/: a cycle of calls among " + ", ".join(cycle))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", help="the source tree (holding src/, include/, tools/)")
    p.add_argument("--objects", default="", help="the libraries' object files, separated by |")
    p.add_argument("--nm", default="nm", help="the nm program (default: nm)")
    args = p.parse_args()
    rules = parse_table()
    problems, used = [], set()
    check_includes(args.root, rules, problems, used)
    for key in sorted(set(EXCEPTIONS) - used):
        problems.append(f"check_layers.py: the exception {' -> '.join(key)} no longer occurs: delete it")
    objects = [o for o in args.objects.split("|") if o]
    if objects:
        try:
            check_calls(objects, args.nm, rules, problems)
        except (OSError, subprocess.CalledProcessError) as e:
            problems.append(f"cannot read the object files with {args.nm}: {e}")
    for line in problems:
        print(line)
    if problems:
        print(f"check_layers: {len(problems)} problem(s)")
        return 1
    n = len(objects)
    print("check_layers: no upward include and no include cycle in src/ and tools/cli/"
          + (f"; no upward call and no call cycle among {n} object files" if n else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
