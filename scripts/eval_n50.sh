#!/usr/bin/env bash
# The README's results tables: questions 0-49 of HotpotQA, 2Wiki and MuSiQue, every method, the
# default embedded model in repeatable serving. Resumable: run it again to continue.
#
#   bash scripts/eval_n50.sh before   # the code before the small-model work (issue 16), pinned
#   bash scripts/eval_n50.sh after    # the current code (model profile applied)
#   bash scripts/eval_n50.sh rag_ef   # RAG-EF's ladder (S, S ∪ E, Eq. 1) beside standard_rag,
#                                     # on the corpus of those questions (benchmarks/rag_ef_n50.py)
#
# "before" runs the pinned commit below from a git worktree (.eval-before/) with this
# checkout's .venv, so a resumed run never mixes code versions. Rows go to
# docs/results/n50/<label>/<dataset>/, the report to docs/results/n50/<label>/.
set -euo pipefail
cd "$(dirname "$0")/.."
LABEL=${1:-after}
BEFORE_COMMIT=b99a6b7  # main before the small-model work: 64049d9 + this script's method list
ROOT=$PWD
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
METHODS=${METHODS:-standard_rag,missing_knowledge,iterkey,migres,rfm_rag}
OUT=$ROOT/docs/results/n50/$LABEL
case "$LABEL" in
  rag_ef)
    for ds in hotpotqa 2wikimultihopqa musique; do
      python benchmarks/rag_ef_n50.py --dataset "$ds" --limit 50 --out "docs/results/n50/rag_ef/$ds"
    done
    gaprag report docs/results/n50/rag_ef/{hotpotqa,2wikimultihopqa,musique} --out docs/results/n50/rag_ef
    exit 0 ;;
  before)
    if [[ ! -d .eval-before ]]; then git worktree add --detach .eval-before "$BEFORE_COMMIT"; fi
    export PYTHONPATH=$ROOT/.eval-before
    CODE=$ROOT/.eval-before ;;
  after) CODE=$ROOT ;;
  *) echo "usage: bash scripts/eval_n50.sh before|after|rag_ef" >&2; exit 2 ;;
esac
cd "$CODE"
for ds in hotpotqa 2wikimultihopqa musique; do
  extra=()
  # MIGRES's released code seeds 2Wiki's kinship definitions (docs/methods/migres.md)
  if [[ $LABEL == after && $ds == 2wikimultihopqa ]]; then extra=(--set migres.seed_facts=true); fi
  gaprag eval --methods "$METHODS" --dataset "$ds" --limit 50 --resume --out "$OUT/$ds" "${extra[@]}"
done
cd "$ROOT" && unset PYTHONPATH  # the report with the current code
gaprag report "$OUT/hotpotqa" "$OUT/2wikimultihopqa" "$OUT/musique" --out "$OUT"
