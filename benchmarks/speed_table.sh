#!/usr/bin/env bash
# Seconds per question of the results table's five methods, the n = 50 results' setting
# against this checkout's default, on the same questions, one after the other, on this machine:
#
#   pinned:  the code of scripts/eval_n50.sh after, at its commit (no reply memo) on xllamacpp,
#            i.e. how the n = 50 rows are made;
#   current: this checkout (reply memo) on the engine gaprag picks here by default
#            (on an AVX-512 CPU the prebuilt llama-server of gaprag[avx512], else xllamacpp).
#
# Questions from index 60 on (never the reported 0-49): HotpotQA 60-64 by default.
#   bash benchmarks/speed_table.sh [DATASET] [OFFSET] [N]
# Rows go to benchmarks/speed/<dataset>/{pinned,current}/; the comparison (gaprag report with
# --before) to benchmarks/speed/<dataset>/. Stop other CPU work first (an evaluation, tests).
set -euo pipefail
cd "$(dirname "$0")/.."
DS=${1:-hotpotqa}
OFFSET=${2:-60}
N=${3:-5}
ROOT=$PWD
PINNED=$(sed -n 's/^AFTER_COMMIT=\([0-9a-f]*\).*/\1/p' scripts/eval_n50.sh)
METHODS=standard_rag,missing_knowledge,iterkey,migres,rfm_rag
OUT=$ROOT/benchmarks/speed/$DS
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
CODE=$ROOT/.eval-after
. scripts/pinned_worktree.sh
pinned_worktree "$CODE" "$PINNED"
extra=()
if [[ $DS == 2wikimultihopqa ]]; then extra=(--set migres.seed_facts=true); fi
(cd "$CODE" && PYTHONPATH=$CODE GAPRAG_LOCAL_ENGINE=xllamacpp gaprag eval --methods "$METHODS" \
  --dataset "$DS" --offset "$OFFSET" --limit "$N" --resume --out "$OUT/pinned" "${extra[@]}")
gaprag eval --methods "$METHODS" --dataset "$DS" --offset "$OFFSET" --limit "$N" --resume \
  --out "$OUT/current" "${extra[@]}"
gaprag report "$OUT/current" --before "$OUT/pinned" --out "$OUT"
