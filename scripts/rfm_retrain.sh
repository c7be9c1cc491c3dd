#!/usr/bin/env bash
# Retrain RFM-RAG's R-Feedback model on the pools its calibration runs built, and set it beside
# the shipped weights on the questions the new weights did not train on (issue 16, item 3).
#
#   bash scripts/rfm_retrain.sh [RUNS] [OUT]
#
# RUNS: the `gaprag calibrate --methods rfm_rag --out RUNS` folder (calibration=true runs on
# questions 60+; default docs/results/calibration/qwen2.5-coder-1.5b/rfm). OUT (default
# RUNS/retrain): retrained/ (weights.json, metrics.json: the held-out questions are
# data.heldout), shipped/ (the shipped weights with the same held-out list), and for each a
# replay of the recorded stop decisions re-scored by its weights (curves.json, profile.toml):
# the threshold each would get and the F1 and calls it gives there. Nothing shipped is
# changed: adopting the new weights is copying retrained/weights.json and metrics.json into
# gaprag/graphs/rfm_rag/feedback_model/ and rerunning `python -m lab rfm calibrate` with --weights pointing there.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-docs/results/calibration/qwen2.5-coder-1.5b/rfm}
OUT=${2:-$RUNS/retrain}
# this checkout's environment, else the one already on PATH (a git worktree has no .venv)
if [[ -f .venv/bin/activate ]]; then . .venv/bin/activate; fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
sets=()
for ds in hotpotqa 2wikimultihopqa musique; do
  if [[ -f $RUNS/$ds/results.jsonl ]]; then sets+=("$RUNS/$ds"); fi
done
if [[ ${#sets[@]} -eq 0 ]]; then
  echo "rfm_retrain: no calibration runs under $RUNS (gaprag calibrate --methods rfm_rag --out $RUNS)" >&2
  exit 2
fi
runs=$(IFS=,; echo "${sets[*]}")
mkdir -p "$OUT/retrained" "$OUT/shipped"
python -m lab rfm train --source graph_pools --runs "$runs" --label answer --out "$OUT/retrained" --quiet \
  > "$OUT/retrained/train.json"
cp gaprag/graphs/rfm_rag/feedback_model/weights.json "$OUT/shipped/weights.json"
python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
held = json.loads((out / "retrained" / "metrics.json").read_text())["data"]["heldout"]
note = "the shipped weights; data.heldout copied from retrained/ so both replay the same questions"
(out / "shipped" / "metrics.json").write_text(json.dumps({"note": note, "data": {"heldout": held}}, indent=1) + "\n")
PY
# the replays write RUNS/curves.json: keep the one of the recorded probabilities
if [[ -f $RUNS/curves.json ]]; then cp "$RUNS/curves.json" "$OUT/recorded_curves.json"; fi
for w in shipped retrained; do
  python -m lab rfm calibrate --runs "$RUNS" --weights "$OUT/$w/weights.json" \
    --profile "$OUT/$w/profile.toml" | sed "s/^/$w: /"
  mv "$RUNS/curves.json" "$OUT/$w/curves.json"
done
if [[ -f $OUT/recorded_curves.json ]]; then mv "$OUT/recorded_curves.json" "$RUNS/curves.json"; fi
python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
m = json.loads((out / "retrained" / "metrics.json").read_text())
print(f"held-out questions: {len(m['data']['heldout'])}; retrained test AUC {m['test'].get('auc')}, "
      f"cross-validated AUC {m['cross_validation']['auc_model']['mean']}")
for w in m.get("warnings", []):
    print(f"retrained: warning: {w}")
for w in ("shipped", "retrained"):
    c = json.loads((out / w / "curves.json").read_text())["rfm_rag"]
    b = c["chosen"]
    print(f"{w}: rf_threshold {min(b['threshold'], 1.0):g}, F1 {b['f1']:.3f}, "
          f"{b['llm_calls']:.1f} calls, stops early on {b['stop_rate']:.0%} ({c['questions']} questions)")
PY
