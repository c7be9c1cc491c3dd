#!/usr/bin/env bash
# The README's results table: questions 0-49 of HotpotQA, 2Wiki and MuSiQue, every method, the
# default embedded model in repeatable serving. Resumable: run it again to continue.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
METHODS=${METHODS:-standard_rag,missing_knowledge,iterkey,migres,rfm_rag}
for ds in hotpotqa 2wikimultihopqa musique; do
  gaprag eval --methods "$METHODS" --dataset "$ds" --limit 50 --resume --out "docs/results/n50/$ds"
done
gaprag report docs/results/n50/hotpotqa docs/results/n50/2wikimultihopqa docs/results/n50/musique \
  --out docs/results/n50
