#!/usr/bin/env bash
# The n = 50 results (README.md, docs/results/README.md): questions 0-49 of HotpotQA, 2Wiki and MuSiQue, every method, the
# default embedded model in repeatable serving. Resumable: run it again to continue.
#
#   bash scripts/eval_n50.sh before   # the code defaults of commit b99a6b7 (a git worktree)
#   bash scripts/eval_n50.sh after    # the calibrated profile, at commit a2f8522 (a git worktree)
#   bash scripts/eval_n50.sh gated    # the shipped profile with the shared gate (every iterative
#                                     # method, IRCoT included), at commit GATED_COMMIT below;
#                                     # the sets in turns of 10 questions, so a partial run
#                                     # covers all three
#   bash scripts/eval_n50.sh escalation  # plain RAG and escalating_rag in the shipped profile, at
#                                     # ESCALATION_COMMIT below (one run: escalating_rag's plain
#                                     # RAG call is answered from standard_rag's); turns of 10
#   bash scripts/eval_n50.sh paper    # the paper configuration (--profile paper) of every
#                                     # iterative method but IRCoT beside plain RAG, at
#                                     # PAPER_COMMIT below, questions 0-19 in turns of 10, a
#                                     # 32k-token context, the prompt cache on
#                                     # (GAPRAG_LOCAL_CACHE_PROMPT=1)
#   bash scripts/eval_n50.sh paper-ircot  # IRCoT's paper configuration at PAPER_IRCOT_COMMIT,
#                                     # the same questions and serving, into the same folder
#   bash scripts/eval_n50.sh both     # set by set: after, then before (a paired set at a time)
#   bash scripts/eval_n50.sh rag_ef   # RAG-EF's ladder (S, S ∪ E, Eq. 1) beside standard_rag,
#                                     # on the corpus of those questions (benchmarks/rag_ef_n50.py);
#                                     # SYNTH_CONCURRENCY=2 builds S two calls at a time
#                                     # (pinned too: S, E and the evaluation span sessions)
#   bash scripts/eval_n50.sh rag_ef_paper  # the same ladder as the paper gives it: S written by
#                                     # the Appendix A instruction alone, every rag_ef variant
#                                     # in --profile paper (32k context), at RAG_EF_PAPER_COMMIT;
#                                     # HotpotQA unless DATASETS_RAG_EF_PAPER says otherwise
#
# "before" and "after" each run a pinned commit (below) from a git worktree (.eval-<label>/)
# with this checkout's .venv, so a run resumed in a later session never mixes code versions.
# Rows go to docs/results/n50/<label>/<dataset>/, the report (made with the current code) to
# docs/results/n50/<label>/; the after report also compares each method with the before run.
set -euo pipefail
cd "$(dirname "$0")/.."
LABEL=${1:-after}
BEFORE_COMMIT=b99a6b7  # that commit's code defaults: 64049d9 + this script's method list
AFTER_COMMIT=a2f8522  # the calibrated profile, the short-answer step, MIGRES's empty-pool forced answer
GATED_COMMIT=3bbe2bc  # the profile with the gate and reader settings chosen on questions 60+
ESCALATION_COMMIT=15e5281  # escalating_rag and its profile as chosen on questions 60+
PAPER_COMMIT=c1e100a  # the paper configuration (gaprag/profiles/paper.toml), prompt cache on
# (its first rows, with the cache off at c55005c, are in docs/results/n50/paper-cache-off/).
# The rows of standard_rag and iterkey_paper were made at f681d21 (the first at 62bfc0e, whose
# code differs from f681d21's only in IRCoT): their paper-mode code is c1e100a's (IterKey's one
# change, the forced choice on an endpoint without logprobs, reaches no row: every validation
# had logprobs). Missing-Knowledge (md5 de-duplication), MIGRES (the answer-first main call),
# RFM-RAG (Prompt 1 on the round's query) and IRCoT (the released code's step rules and CoT
# reader) changed in paper mode at c1e100a: their rows are made at c1e100a.
# IRCoT's paper mode answers with the direct reader from PAPER_IRCOT_COMMIT on (the reader the
# paper's rule picks for the embedded model on development questions: docs/methods/ircot.md);
# its rows at c1e100a (the chain-of-thought reader) left the tree with that change.
PAPER_IRCOT_COMMIT=c0d2b3d
RAG_EF_PAPER_COMMIT=62bfc0e  # the ladder with --synth-prompt paper --profile paper
RAG_EF_COMMIT=2b0d498  # RAG-EF's ladder: E_r (near copies replaced by sampled rewordings)
# beside S and E. The code that builds S and E and evaluates rag_ef_S/SE/standard is the same as
# at e4ef8ab (E is built with rewrites=0, as it was first built; LLM.generate only gained
# optional per-call sampling), which made HotpotQA's and 2Wiki's S, E and rows and MuSiQue's
# first paragraphs of S; e4ef8ab's package code is 2ba43c3's, which made HotpotQA's S.
# (The after rows of HotpotQA questions 0-7 for the four other methods were made by 7bea6fb,
# whose code differs from a2f8522 only in MIGRES, the RAG-EF ladder and the report.)
ROOT=$PWD
. scripts/pinned_worktree.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# the engine of every row so far: a llama-server built later (GAPRAG_FAST=server) would
# otherwise be preferred, and another engine's arithmetic changes outputs
export GAPRAG_LOCAL_ENGINE=${GAPRAG_LOCAL_ENGINE:-xllamacpp}
METHODS=${METHODS:-standard_rag,missing_knowledge,iterkey,migres,rfm_rag}
# DATASETS="hotpotqa" runs one set (e.g. to finish a set before and after before the next)
DATASETS=${DATASETS:-hotpotqa 2wikimultihopqa musique}
OUT=$ROOT/docs/results/n50/$LABEL
# the set directories under $1 that hold rows (what a report can cover)
sets_with_rows() {
  for ds in hotpotqa 2wikimultihopqa musique; do
    if [[ -f $1/$ds/results.jsonl ]]; then echo "$1/$ds"; fi
  done
}
variant=()
case "$LABEL" in
  both)
    for ds in $DATASETS; do
      DATASETS=$ds bash "$ROOT/scripts/eval_n50.sh" after
      DATASETS=$ds bash "$ROOT/scripts/eval_n50.sh" before
    done
    exit 0 ;;
  rag_ef)
    CODE=$ROOT/.eval-rag_ef
    pinned_worktree "$CODE" "$RAG_EF_COMMIT"
    for ds in $DATASETS; do
      # from this checkout, so the paths its rows record stay relative
      PYTHONPATH=$CODE python "$CODE/benchmarks/rag_ef_n50.py" --dataset "$ds" --limit 50 \
        --out "docs/results/n50/rag_ef/$ds" --concurrency "${SYNTH_CONCURRENCY:-1}"
    done
    mapfile -t dirs < <(sets_with_rows docs/results/n50/rag_ef)
    gaprag report "${dirs[@]}" --out docs/results/n50/rag_ef
    exit 0 ;;
  rag_ef_paper)
    CODE=$ROOT/.eval-rag_ef_paper
    pinned_worktree "$CODE" "$RAG_EF_PAPER_COMMIT"
    export GAPRAG_LOCAL_CTX=${GAPRAG_LOCAL_CTX:-32768} GAPRAG_LOCAL_CACHE_PROMPT=1
    for ds in ${DATASETS_RAG_EF_PAPER:-hotpotqa}; do
      PYTHONPATH=$CODE python "$CODE/benchmarks/rag_ef_n50.py" --dataset "$ds" --limit 50 \
        --out "docs/results/n50/rag_ef_paper/$ds" --synth-prompt paper --profile paper \
        --concurrency "${SYNTH_CONCURRENCY:-1}"
    done
    mapfile -t dirs < <(sets_with_rows docs/results/n50/rag_ef_paper)
    if ((${#dirs[@]})); then gaprag report "${dirs[@]}" --out docs/results/n50/rag_ef_paper; fi
    exit 0 ;;
  before) COMMIT=$BEFORE_COMMIT ;;
  after) COMMIT=$AFTER_COMMIT ;;
  gated)
    COMMIT=$GATED_COMMIT
    # the shipped profile of every method, and IRCoT's gate at p 0.75: the cheapest gated
    # configuration calibration found a gain for (1.9 calls a question on questions 60+)
    variant=(--variant "ircot_gate_p75=ircot:gate_threshold=-0.2877")
    METHODS=${METHODS_GATED:-standard_rag,missing_knowledge,iterkey,migres,rfm_rag,ircot,ircot_gate_p75}
    STEPS=${STEPS:-10 20 30 40 50} ;;
  escalation)
    COMMIT=$ESCALATION_COMMIT
    METHODS=${METHODS_ESCALATION:-standard_rag,escalating_rag}
    STEPS=${STEPS:-10 20 30 40 50} ;;
  paper)
    COMMIT=$PAPER_COMMIT
    # whole passages and IRCoT's demonstrations need more than 4,096 tokens; the model takes 32k;
    # the prompt cache on: each IRCoT step repeats most of the previous step's prompt
    export GAPRAG_LOCAL_CTX=${GAPRAG_LOCAL_CTX:-32768} GAPRAG_LOCAL_CACHE_PROMPT=1
    METHODS=standard_rag
    for m in missing_knowledge iterkey migres rfm_rag; do
      variant+=(--variant "${m}_paper=$m:profile=paper")
      METHODS+=",${m}_paper"
    done
    METHODS=${METHODS_PAPER:-$METHODS}
    STEPS=${STEPS:-10 20} ;;
  paper-ircot)
    COMMIT=$PAPER_IRCOT_COMMIT
    export GAPRAG_LOCAL_CTX=${GAPRAG_LOCAL_CTX:-32768} GAPRAG_LOCAL_CACHE_PROMPT=1
    variant+=(--variant "ircot_paper=ircot:profile=paper")
    METHODS=ircot_paper
    OUT=$ROOT/docs/results/n50/paper
    STEPS=${STEPS:-10 20} ;;
  *) echo "usage: bash scripts/eval_n50.sh before|after|gated|escalation|paper|paper-ircot|both|rag_ef|rag_ef_paper" >&2; exit 2 ;;
esac
CODE=$ROOT/.eval-$LABEL
pinned_worktree "$CODE" "$COMMIT"
export PYTHONPATH=$CODE
cd "$CODE"
for limit in ${STEPS:-50}; do
  for ds in $DATASETS; do
    extra=()
    # MIGRES's released code seeds 2Wiki's kinship definitions (docs/methods/migres.md)
    if [[ $LABEL != before && $ds == 2wikimultihopqa && $METHODS == *migres* ]]; then extra=(--set migres.seed_facts=true); fi
    # the paper run: MIGRES's seeded definitions as above, IRCoT's demonstrations of the set
    if [[ $LABEL == paper && $ds == 2wikimultihopqa ]]; then extra=(--set migres_paper.seed_facts=true); fi
    if [[ $LABEL == paper-ircot ]]; then extra=(--set "ircot_paper.demo_set=$ds"); fi
    gaprag eval --methods "$METHODS" --dataset "$ds" --limit "$limit" --resume --out "$OUT/$ds" "${extra[@]}" "${variant[@]}"
  done
done
cd "$ROOT" && unset PYTHONPATH  # the report with the current code
mapfile -t dirs < <(sets_with_rows "$OUT")
versus=()
# after is compared with before (b99a6b7's code defaults), gated with after (the ungated profile),
# escalation with gated (each method with its own gate)
case "$LABEL" in after) earlier=before ;; gated) earlier=after ;; escalation) earlier=gated ;; paper|paper-ircot) earlier=gated ;; *) earlier= ;; esac
if [[ -n $earlier ]]; then
  while read -r b; do versus+=(--before "$b"); done < <(sets_with_rows "$ROOT/docs/results/n50/$earlier")
fi
gaprag report "${dirs[@]}" --out "$OUT" "${versus[@]}"
