#!/usr/bin/env bash
# Set up gaprag in ./.venv on a machine with only Python 3.11 (idempotent).
#   bash scripts/setup.sh            # runtime + the default local model (qwen2.5-coder-1.5b)
#   bash scripts/setup.sh --dev      # + test tools, Studio, Postgres, PostgreSQL server, Milvus Lite, the test model
# The LLM engines installed by default are prebuilt wheels (seconds); see benchmarks/README.md:
# xllamacpp everywhere, and on a CPU with AVX-512 (VNNI, BF16) also gaprag[avx512], a prebuilt
# llama-server 1.55x faster at prompts, which gaprag then prefers. Optional native builds (gaprag
# prefers them when present):
#   GAPRAG_FAST=1       also compiles llama-cpp-python[server] (about 6.5 min once on 2 cores)
#   GAPRAG_FAST=server  builds llama.cpp's llama-server alone for this CPU (cmake + a C++
#                       compiler, all cores; cached per CPU in $GAPRAG_HOME/build). If the build
#                       fails, setup goes on with xllamacpp and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=0
[[ "${1:-}" == "--dev" ]] && DEV=1
PY=${PYTHON:-python3}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# llama.cpp source: the copy vendored in this llama-cpp-python sdist (pinned, from PyPI)
LLAMA_SRC_PIN=0.3.36

if [[ ! -x .venv/bin/python ]]; then
  echo "==> creating .venv"
  "$PY" -m venv .venv
fi
. .venv/bin/activate
# torch first, pinned: anything else pulls a multi-GB CUDA build (the CPU wheel lies on disk here)
if ! python -c "import torch" 2>/dev/null; then
  echo "==> installing torch==2.13.0 (CPU)"
  pip install -q torch==2.13.0
fi
EXTRAS="local"
[[ $DEV == 1 ]] && EXTRAS="local,studio,postgres,milvus,dev"
echo "==> installing gaprag[$EXTRAS]"
pip install -q -e ".[$EXTRAS]"
if python -c "from gaprag.llm.server import prebuilt_server_fits as f; raise SystemExit(not f())"; then
  echo "==> this CPU has AVX-512 (VNNI, BF16): installing the prebuilt llama-server (gaprag[avx512])"
  pip install -q -e ".[avx512]" || echo "warning: gaprag[avx512] did not install; gaprag uses xllamacpp"
fi

# Build llama-server (target alone, -march=native) into .venv/bin; cached per CPU and pin.
build_llama_server() {
  local home=${GAPRAG_HOME:-$HOME/.cache/gaprag}
  local cpu
  cpu=$( (grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m) | sha256sum | cut -c1-12)
  local cache="$home/build/llama-server-$LLAMA_SRC_PIN-$cpu"
  local bin=.venv/bin/llama-server
  if [[ -x $bin ]] && "$bin" --version >/dev/null 2>&1; then
    echo "==> llama-server: already built ($bin)"
    return 0
  fi
  if [[ -x $cache/llama-server ]] && "$cache/llama-server" --version >/dev/null 2>&1; then
    echo "==> llama-server: reusing the build cached in $cache"
    cp "$cache/llama-server" "$bin"
    return 0
  fi
  for tool in cmake c++; do
    command -v "$tool" >/dev/null || { echo "$tool not found"; return 1; }
  done
  mkdir -p "$cache"
  local log="$cache/build.log" src="$cache/src"
  echo "==> building llama-server for this CPU (one time, several minutes; log: $log)"
  local t0=$SECONDS
  # (called in an `||` list, so `set -e` is off in here: every step is chained with &&)
  {
    if [[ ! -d $src/llama_cpp_python-$LLAMA_SRC_PIN ]]; then
      rm -rf "$src" && mkdir -p "$src" &&
        pip download -q --no-deps --no-binary llama-cpp-python -d "$src" "llama-cpp-python==$LLAMA_SRC_PIN" &&
        tar xzf "$src/llama_cpp_python-$LLAMA_SRC_PIN.tar.gz" -C "$src"
    fi &&
      local gen=() &&
      { ! command -v ninja >/dev/null || gen=(-G Ninja); } &&
      cmake -S "$src/llama_cpp_python-$LLAMA_SRC_PIN/vendor/llama.cpp" -B "$cache/cmake" "${gen[@]}" \
        -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF &&
      cmake --build "$cache/cmake" --target llama-server -j "$(nproc)"
  } >"$log" 2>&1 || { tail -5 "$log"; return 1; }
  "$cache/cmake/bin/llama-server" --version >/dev/null 2>&1 || { echo "the built binary does not run"; return 1; }
  cp "$cache/cmake/bin/llama-server" "$cache/llama-server" && cp "$cache/llama-server" "$bin" || return 1
  rm -rf "$cache/cmake" "$src"  # keep only the binary
  echo "==> llama-server built in $((SECONDS - t0)) s"
}
if [[ "${GAPRAG_FAST:-0}" == 1 ]]; then
  echo "==> building llama-cpp-python (one time, several minutes)"
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} pip install -q 'llama-cpp-python[server]==0.3.36' \
    || echo "warning: llama-cpp-python did not build; gaprag uses the prebuilt xllamacpp engine"
elif [[ "${GAPRAG_FAST:-0}" == server ]]; then
  build_llama_server || echo "warning: building llama-server failed (see above); gaprag uses the prebuilt xllamacpp engine"
fi

if [[ $DEV == 1 ]]; then
  gaprag llm install smollm2-135m
  # a real PostgreSQL server for the checkpointer integration test
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
      echo "==> installing PostgreSQL (apt)"
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
        || echo "warning: PostgreSQL could not be installed; its test will be skipped"
    fi
  fi
  # a headless browser for the report.html test (Debian's chromium + chromedriver; Selenium is in [dev])
  if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
      echo "==> installing chromium and chromium-driver (apt)"
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
        || echo "warning: chromium could not be installed; the report browser test will be skipped"
    fi
  fi
else
  gaprag llm install "${GAPRAG_LOCAL_MODEL:-qwen2.5-coder-1.5b}"
fi
echo "==> ready: . .venv/bin/activate"
