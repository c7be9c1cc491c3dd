"""scripts/rag_ef_ladder_rows.py: RAG-EF's ladder tables from the ladder's rows and journal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "rag_ef_ladder_rows.py"


def load() -> ModuleType:
    return load_script("scripts/rag_ef_ladder_rows.py")


def rows(scores: dict[str, list[float]]) -> list[dict[str, Any]]:
    """Result rows: ``scores[method][k]`` is the F1 of question ``qk``."""
    return [
        {"method": m, "id": f"q{k}", "f1": f, "dataset": "hotpotqa", "answers": ["a"]}
        for m, fs in scores.items()
        for k, f in enumerate(fs)
    ]


def expert(k: int, question: str, original: str) -> dict[str, Any]:
    meta = {"origin_id": f"q{k}", "original_question": original}
    return {"source": "expert", "question": question, "answer": "a", "chunk_id": "c", "meta": meta}


PAIRS = [
    {"source": "synthetic", "question": "s?", "answer": "s", "chunk_id": "c", "meta": {}},
    expert(0, "Who was born first, A or B?", "Who was born first, A or B?"),  # identical
    expert(1, "Who directed the film starring X?", "Who directed the film featuring X?"),  # near
    expert(2, "Which team does Y play for?", "Y plays football for a club in which region?"),
    {"processed": "ladder:expert", "keys": ["q0", "q1", "q2"]},
]


REWORDED = [
    {
        **expert(0, "Of A and B, whose birth came earlier?", "Who was born first, A or B?"),
        "answer": "b",
    },  # the expert got it wrong
    PAIRS[2],  # still a near copy: no sampled rewrite qualified
    PAIRS[3],
    {"processed": "ladder:expert", "keys": ["q0", "q1", "q2"]},
]


def test_splits_the_expert_gain_by_how_close_e_is_to_the_test_question() -> None:
    mod = load()
    result = rows(
        {
            "standard_rag": [0.0, 0.0, 0.5],
            "rag_ef_standard": [0.0, 0.5, 0.5],
            "rag_ef_S": [0.0, 0.0, 1.0],
            "rag_ef_SE": [1.0, 1.0, 0.0],
            "rag_ef_SE_reworded": [0.0, 1.0, 1.0],
        }
    )
    text = mod.tables([("hotpotqa", result, {"E": PAIRS, "E_r": REWORDED})])
    lines = text.splitlines()
    f1_row = next(line for line in lines if line.startswith("| HotpotQA | 0.167"))
    # rag_ef_SE: mean 2/3, paired +0.5 (2 wins, 1 loss, 3 questions)
    assert "0.667; +0.50" in f1_row and "(2 / 1, n = 3)" in f1_row
    e_row = [line for line in lines if line.startswith("| HotpotQA | E | 3 |")]
    assert len(e_row) == 1
    cells = [c.strip() for c in e_row[0].strip("|").split("|")]
    # 3 pairs, one identical, two near copies (q0, q1), one rewording (q2)
    assert cells[4:7] == ["1", "2", "1.00"]  # every expert answer is the gold "a"
    assert cells[7].startswith("+1.00") and "(2 / 0, n = 2)" in cells[7]
    assert cells[8].startswith("−0.50") and "(0 / 1, n = 1)" in cells[8]
    assert cells[9].startswith("+0.50") and "(1 / 0, n = 1)" in cells[9]
    # E_r: q0 reworded now, q1 still a near copy; its rows are rag_ef_SE_reworded's
    r_row = next(line for line in lines if line.startswith("| HotpotQA | E_r | 3 |"))
    cells = [c.strip() for c in r_row.strip("|").split("|")]
    assert cells[4:7] == ["0", "1", "0.67"]  # q0's answer "b" is wrong
    assert cells[7].startswith("+1.00") and "(1 / 0, n = 1)" in cells[7]  # q1
    assert "+0.25" in cells[8] and "(1 / 0, n = 2)" in cells[8]  # q0 0, q2 +0.5


def test_pools_sets_and_skips_failed_rows() -> None:
    mod = load()
    a = rows({"standard_rag": [0.0, 1.0], "rag_ef_SE": [1.0, 1.0]})
    b = [{**r, "id": "m" + r["id"], "dataset": "musique"} for r in a]
    b.append({"method": "rag_ef_SE", "id": "mq0", "error": "timeout", "f1": 0.0})
    text = mod.tables([("hotpotqa", a, {}), ("musique", b, {})])
    pooled = next(line for line in text.splitlines() if line.startswith("| pooled | 0.500"))
    assert "(2 / 0, n = 4)" in pooled


def test_cli_names_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text(json.dumps(rows({"standard_rag": [1.0]})[0]) + "\n")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "pairs.jsonl not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_prints_both_tables(tmp_path: Path) -> None:
    d = tmp_path / "hotpotqa"
    d.mkdir()
    result = rows({"standard_rag": [0.0, 0.0, 0.0], "rag_ef_SE": [1.0, 1.0, 1.0]})
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in result))
    (d / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(d)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "| HotpotQA | 0.000 (n = 3) | – | – | 1.000; +1.00" in proc.stdout
    assert "| HotpotQA | E | 3 | " in proc.stdout


def test_describes_s_by_its_pairs_and_answer_length() -> None:
    mod = load()
    synthetic = [
        {"source": "synthetic", "question": "q?", "answer": a, "chunk_id": c, "meta": {}}
        for a, c in (("one", "c1"), ("a b c d e f g h i j k", "c1"), ("two words", "c2"))
    ]
    text = mod.tables([("hotpotqa", rows({"standard_rag": [1.0]}), {"E": [*synthetic, *PAIRS]})])
    row = next(line for line in text.splitlines() if line.startswith("| HotpotQA | 4 |"))
    # 4 synthetic pairs (PAIRS adds one, of paragraph "c") of 3 paragraphs; answers of 1, 11,
    # 2 and 1 words; the expert pairs are not S
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:] == ["4", "3", "1.3", "3.8", "0.25"]
