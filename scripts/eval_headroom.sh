#!/usr/bin/env bash
# Calibration rows for answer selection and escalation: questions 60-79 of HotpotQA, 2Wiki and
# MuSiQue (never the evaluation questions 0-49), every method in the shipped profile of the
# default embedded model, with each iterative method's gate recording plain RAG's answer and its
# score but never stopping (gate_threshold above any probability), so every row holds both
# candidates: the gate's answer (decision `gate`) and the loop's (the prediction; its call's
# messages are in the traces, to be re-scored offline). Resumable: run it again to continue.
#
#   bash scripts/eval_headroom.sh          # in turns of 5 questions a set, so a partial run covers all three
#   METHODS=standard_rag,missing_knowledge,rfm_rag,ircot STEPS=10 bash scripts/eval_headroom.sh
#                                          # more questions for the loops escalation can afford
#
# The code is pinned (a git worktree at .eval-headroom/), so a run resumed in a later session
# never mixes code versions. Rows go to docs/results/headroom/calib60/<dataset>/.
set -euo pipefail
cd "$(dirname "$0")/.."
COMMIT=ff6f07c  # the gated profile as measured on questions 0-49 (docs/results/n50/gated)
ROOT=$PWD
. scripts/pinned_worktree.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export GAPRAG_LOCAL_ENGINE=${GAPRAG_LOCAL_ENGINE:-xllamacpp}  # the engine of the gated rows
METHODS=${METHODS:-standard_rag,missing_knowledge,iterkey,migres,rfm_rag,ircot}
DATASETS=${DATASETS:-hotpotqa 2wikimultihopqa musique}
OUT=$ROOT/docs/results/headroom/calib60
never=()
for m in ${METHODS//,/ }; do [[ $m == standard_rag ]] || never+=(--set "$m.gate_threshold=1.0"); done
CODE=$ROOT/.eval-headroom
pinned_worktree "$CODE" "$COMMIT"
export PYTHONPATH=$CODE
cd "$CODE"
for limit in ${STEPS:-5 10 15 20}; do
  for ds in $DATASETS; do
    extra=()
    if [[ $ds == 2wikimultihopqa && $METHODS == *migres* ]]; then extra=(--set migres.seed_facts=true); fi
    gaprag eval --methods "$METHODS" --dataset "$ds" --offset 60 --limit "$limit" --resume \
      --out "$OUT/$ds" --quiet "${never[@]}" "${extra[@]}"
  done
done
