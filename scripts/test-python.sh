#!/usr/bin/env bash
# test-python.sh — builds the Python package the way a user does (pip install .,
# pyproject.toml: scikit-build-core over this CMake project) into a virtual
# environment and runs its tests (tests/python, pytest).
#
#   scripts/test-python.sh [pytest arguments]
#
#   ATTN_PY_VENV=DIR   the environment (default build-python/venv), created when
#                      absent and reused after: pip installs only what is missing
#   ATTN_PY_TORCH=0    do not install torch (about 5 GB with its CUDA wheels,
#                      3-4 minutes on a fresh machine) nor transformers: the tests
#                      against PyTorch and Hugging Face then skip, saying so
#   ATTN_PY_EDITABLE=1 pip install -e . instead (the extension is rebuilt on import)
#   ATTN_PY_SANITIZE=1 then build the extension again with AddressSanitizer +
#                      UndefinedBehaviorSanitizer (its own build folder,
#                      build-python/asan-*, installed with --target into
#                      build-python/asan-site) and run the same tests under
#                      them: python with the sanitizers' runtimes preloaded,
#                      leaks not checked (the interpreter keeps its own)
#
# Needs python3 with venv and its headers (Debian: python3-venv, python3-dev;
# scripts/deps-python.txt) and the package index for numpy, pytest,
# scikit-build-core and torch.  The CMake build is kept in build-python/ (the
# pyproject's build-dir), so a second run recompiles only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
venv=${ATTN_PY_VENV:-build-python/venv}
case $venv in /*) ;; *) venv=$PWD/$venv ;; esac # the tests run from tests/python
if [[ ! -x "$venv/bin/python" ]]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
py="$venv/bin/python"
packages=(numpy pytest scikit-build-core ml_dtypes) # ml_dtypes: numpy's bfloat16
if [[ "${ATTN_PY_TORCH:-1}" != 0 ]]; then
    packages+=(torch transformers) # transformers: attn.hf against its own sdpa (tests/python/test_hf.py)
fi
"$py" -m pip install -q "${packages[@]}"
echo "== test-python: environment ready ($((SECONDS - start)) s)"
# --no-build-isolation: the build uses the environment's scikit-build-core
# instead of fetching one into a throw-away environment on every run.
editable=()
[[ "${ATTN_PY_EDITABLE:-0}" == 1 ]] && editable=(-e)
"$py" -m pip install -q --no-build-isolation "${editable[@]}" .
echo "== test-python: package built and installed ($((SECONDS - start)) s)"
# From the tests' folder, so that `import attn` is the installed package.
cd tests/python
"$py" -m pytest -q -p no:cacheprovider "$@" .
echo "== test-python: done ($((SECONDS - start)) s)"
if [[ "${ATTN_PY_SANITIZE:-0}" == 1 ]]; then
    cd ../..
    site=$PWD/build-python/asan-site
    rm -rf "$site"
    "$py" -m pip install -q --no-build-isolation --no-deps --target "$site" \
        -C cmake.define.ATTN_SANITIZE=ON -C cmake.build-type=RelWithDebInfo \
        -C "build-dir=build-python/asan-{wheel_tag}" .
    echo "== test-python: sanitizer build installed in $site ($((SECONDS - start)) s)"
    cd tests/python
    preload="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
    # The extension must be the instrumented one, or the run proves nothing.
    PYTHONPATH=$site LD_PRELOAD=$preload ASAN_OPTIONS=detect_leaks=0 "$py" -c \
        "import attn, sys; sys.exit(0 if attn.__file__.startswith('$site') else 'attn came from ' + attn.__file__)"
    PYTHONPATH=$site LD_PRELOAD=$preload ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ATTN_PY_UNDER_SANITIZERS=1 "$py" -m pytest -q -p no:cacheprovider "$@" .
    echo "== test-python: done under ASan+UBSan ($((SECONDS - start)) s)"
fi
