#!/usr/bin/env bash
# Set up (dev) and run the whole test suite: unit tests, then integration tests that start
# their own servers (embedded llama.cpp with SmolLM2-135M, Chroma, PostgreSQL, Milvus Lite,
# langgraph dev).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 GAPRAG_LOCAL_MODEL=${GAPRAG_LOCAL_MODEL:-smollm2-135m}
unset GAPRAG_BASE_URL OPENAI_BASE_URL
ruff check gaprag lab tests scripts benchmarks
mypy
lint-imports
pytest -q "$@"
