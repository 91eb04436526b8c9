#!/usr/bin/env bash
# same-outputs.sh BUILD_A BUILD_B [WORKDIR] — runs one fixed set of attn
# commands with each build's attn and compares what they wrote, byte for
# byte: stdout, every output file, and stderr with its timings masked.
#
# For moves that must not change behaviour (the foundation issue: "attn model
# trace, attn demo --model, attn sdpa, attn ring produce byte-identical
# outputs before and after").  Build A is usually a worktree of the commit
# before the move:
#     git worktree add /tmp/before HEAD~5 && cmake -S /tmp/before -B /tmp/before/build && \
#         cmake --build /tmp/before/build -j
#     scripts/same-outputs.sh /tmp/before/build build
# The inputs are made once with numpy (a fixed seed) under WORKDIR/in; the
# real models come from scripts/fetch-models.sh (commands that need them are
# skipped, with a line, when they are absent); ring runs need mpirun.
# Exit 0 when every command's outputs agree, 1 naming each that differs.
set -uo pipefail

[[ $# -ge 2 ]] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
build_a=$(cd "$1" && pwd) || exit 2
build_b=$(cd "$2" && pwd) || exit 2
work=${3:-$(mktemp -d /tmp/same-outputs.XXXXXX)}
mkdir -p "$work/in"
models=${ATTN_MODEL_DIR:-$HOME/.cache/attn/models}
qwen=$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
gemma=$models/gemma-3-270m-q4_k_m.gguf
python=${PYTHON:-/usr/bin/python3}

"$python" - "$work/in" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
r = np.random.default_rng(20261205)
def save(name, shape, dtype=np.float32):
    np.save(f"{d}/{name}.npy", r.standard_normal(shape).astype(dtype))
save("q", (2, 37, 4, 16)); save("k", (2, 53, 2, 16)); save("v", (2, 53, 2, 24))
save("q16", (1, 33, 4, 32), np.float16); save("k16", (1, 33, 2, 32), np.float16)
save("v16", (1, 33, 2, 32), np.float16)
save("do", (2, 37, 4, 24))
save("sinks", (4,)); save("bias", (37, 53))
np.save(f"{d}/mask.npy", r.random((2, 1, 37, 53)) < 0.8)
np.save(f"{d}/lens.npy", np.array([53, 20], dtype=np.int32))
save("x", (1, 11, 32)); save("wq", (32, 32)); save("wk", (32, 16)); save("wv", (32, 16)); save("wo", (32, 32))
save("x2", (1, 11, 32))
save("dq_q", (2, 64, 4, 32)); save("dq_k", (2, 64, 2, 32)); save("dq_v", (2, 64, 2, 32))
save("rq", (1, 96, 4, 16)); save("rk", (1, 96, 2, 16)); save("rv", (1, 96, 2, 16)); save("rdo", (1, 96, 4, 16))
EOF

in=$work/in
have_models=0
[[ -f "$qwen" && -f "$gemma" ]] && have_models=1
have_mpi=0
command -v mpirun >/dev/null && have_mpi=1

# name | needs (- | models | mpi) | command, with ATTN for the program and OUT for the run's folder
cases=(
"demo|-|ATTN demo --lang en"
"demo-zh|-|ATTN demo --lang zh --figures OUT"
"sdpa-plain|-|ATTN sdpa -q $in/q.npy -k $in/k.npy -v $in/v.npy -o OUT/o.npy --weights OUT/w.npy --lse OUT/lse.npy"
"sdpa-causal|-|ATTN sdpa -q $in/q.npy -k $in/k.npy -v $in/v.npy -o OUT/o.npy --causal-lower-right --window 7,0 --threads 1"
"sdpa-causal-2t|-|ATTN sdpa -q $in/q.npy -k $in/k.npy -v $in/v.npy -o OUT/o.npy --causal-lower-right --window 7,0 --threads 2"
"sdpa-ref|-|ATTN sdpa -q $in/q.npy -k $in/k.npy -v $in/v.npy -o OUT/o.npy --kernel ref --causal --softcap 30"
"sdpa-mask|-|ATTN sdpa -q $in/q.npy -k $in/k.npy -v $in/v.npy -o OUT/o.npy --mask $in/mask.npy --bias $in/bias.npy --sinks $in/sinks.npy"
"sdpa-lens|-|ATTN sdpa -q $in/q.npy -k $in/k.npy -v $in/v.npy -o OUT/o.npy --key-lengths $in/lens.npy --alibi --scale 0.3"
"sdpa-grad|-|ATTN sdpa -q $in/q.npy -k $in/k.npy -v $in/v.npy -o OUT/o.npy --grad-out $in/do.npy --dq OUT/dq.npy --dk OUT/dk.npy --dv OUT/dv.npy --causal"
"sdpa-half|-|ATTN sdpa -q $in/q16.npy -k $in/k16.npy -v $in/v16.npy -o OUT/o.npy --precision fast --causal"
"sdpa-half-exact|-|ATTN sdpa -q $in/q16.npy -k $in/k16.npy -v $in/v16.npy -o OUT/o.npy --out-dtype f16"
"decode|-|ATTN decode -q $in/dq_q.npy -k $in/dq_k.npy -v $in/dq_v.npy -o OUT/o.npy --prefill 40 --chunk 7 --paged --block-size 16 --rope"
"mha|-|ATTN mha -x $in/x.npy --wq $in/wq.npy --wk $in/wk.npy --wv $in/wv.npy --wo $in/wo.npy --heads 4 --kv-heads 2 -o OUT/o.npy --weights OUT/w.npy --causal"
"trace|-|ATTN trace -x $in/x.npy --wq $in/wq.npy --wk $in/wk.npy --wv $in/wv.npy --wo $in/wo.npy --heads 4 --kv-heads 2 --dir OUT/hooks --causal"
"paths|-|ATTN paths --chapter"
"paths-mha|-|ATTN paths --base $in/x.npy --changed $in/x2.npy --wq $in/wq.npy --wk $in/wk.npy --wv $in/wv.npy --wo $in/wo.npy --heads 4 --kv-heads 2"
"nullspace|-|ATTN nullspace --chapter"
"report|-|ATTN report -q $in/q.npy -k $in/k.npy -v $in/v.npy --html OUT/r.html"
"ring|mpi|mpirun --allow-run-as-root --oversubscribe -np 2 ATTN ring -q $in/rq.npy -k $in/rk.npy -v $in/rv.npy -o OUT/o.npy --lse OUT/lse.npy --causal --grad-out $in/rdo.npy --dq OUT/dq.npy --dk OUT/dk.npy --dv OUT/dv.npy"
"ring-window|mpi|mpirun --allow-run-as-root --oversubscribe -np 2 ATTN ring -q $in/rq.npy -k $in/rk.npy -v $in/rv.npy -o OUT/o.npy --window 9,3 --shard contiguous"
"model-info-qwen|models|ATTN model info $qwen"
"model-run-gemma|models|ATTN model run $gemma --text 'The capital of France is' --top 8 --layer-norms"
"generate-qwen|models|ATTN model generate --model $qwen --text '我吃了一个苹果' --max-tokens 12"
"generate-gemma|models|ATTN model generate --model $gemma --text 'Once upon a time' --max-tokens 10 --temperature 0.8 --top-k 20 --seed 7"
"tokenize|models|ATTN tokenize --model $qwen --text '这台电脑来自苹果 hello' --pieces"
"demo-qwen|models|ATTN demo --model $qwen --no-cost --heads --plot OUT/cos.png"
"demo-gemma|models|ATTN demo --model $gemma --no-cost --lang zh"
"trace-hooks|models|ATTN model trace --model $gemma --text '我吃了一个苹果' --hooks 'blocks.3.*,ln_final.*' -o OUT/cache.npz"
"trace-patch|models|ATTN model trace --model $qwen --text '我吃了一个苹果' --source-text '这台电脑来自苹果' --patch 'blocks.*.hook_resid_pre@-1' --sweep-layers --answer 公司"
"trace-ablate|models|ATTN model trace --model $gemma --text 'The capital of France is' --ablate blocks.5.attn.hook_z:0=zero --ablate blocks.2.attn.hook_z:0=mean --top 3"
"trace-paths|models|ATTN model trace --model $gemma --text '我吃了一个苹果' --source-text '我买了一个苹果' --paths"
"trace-nullspace|models|ATTN model trace --model $gemma --text '我吃了一个苹果' --nullspace 4:all"
"map-model|models|ATTN map --model $gemma --text '我吃了一个苹果' --layer 3 --head all -o OUT/map.svg"
"report-model|models|ATTN report --model $gemma --text '我吃了一个苹果' --layer 2 --html OUT/r.html"
)

# Timings and the memory figures that vary run to run, masked in stderr and
# in stdout lines that print them (the demo's n² timing is off: --no-cost).
mask() { sed -E 's/[0-9]+(\.[0-9]+)? ?(s|ms|us|µs|MiB|GiB|tok\/s|tokens\/s|GB\/s|GFLOP\/s|秒)/<N>\2/g; s/PID-[0-9]+/PID/g'; }

fail=0
for c in "${cases[@]}"; do
    IFS='|' read -r name needs cmd <<<"$c"
    if [[ $needs == models && $have_models -eq 0 ]]; then echo "skip  $name (no models in $models)"; continue; fi
    if [[ $needs == mpi && $have_mpi -eq 0 ]]; then echo "skip  $name (no mpirun)"; continue; fi
    for side in a b; do
        b=$build_a; [[ $side == b ]] && b=$build_b
        out=$work/$side/$name
        rm -rf "$out"; mkdir -p "$out"
        run=${cmd//ATTN/$b/attn}; run=${run//OUT/.}  # relative: an output that records its own path (the report) compares too
        (cd "$out" && eval "$run" >"$out/.stdout" 2>"$out/.stderr.raw"; echo $? >"$out/.rc")
        sed "s#$b#BUILD#g; s#$out#OUT#g" "$out/.stderr.raw" | mask >"$out/.stderr"
        sed -i "s#$b#BUILD#g; s#$out#OUT#g" "$out/.stdout"
        rm "$out/.stderr.raw"
    done
    if diff -r "$work/a/$name" "$work/b/$name" >"$work/$name.diff" 2>&1; then
        echo "same  $name (exit $(cat "$work/a/$name/.rc"))"
        rm "$work/$name.diff"
    else
        echo "DIFF  $name: $work/$name.diff"
        fail=1
    fi
done
echo "outputs under $work"
exit $fail
