"""Evaluation harness: datasets, metrics, the multi-method runner and the report."""

from gaprag.datasets import (
    Dataset,
    Example,
    bundled,
    calibration_slice,
    check_no_overlap,
    load_dataset,
)
from gaprag.eval.report import summarize, write_report
from gaprag.eval.results import read_results
from gaprag.eval.runner import TooManyErrors, aevaluate, evaluate
from gaprag.eval.settings import EvalSettings
from gaprag.metrics import accuracy, exact_match, f1_score, normalize_answer, support_recall

__all__ = [
    "Dataset",
    "EvalSettings",
    "Example",
    "TooManyErrors",
    "accuracy",
    "aevaluate",
    "bundled",
    "calibration_slice",
    "check_no_overlap",
    "evaluate",
    "exact_match",
    "f1_score",
    "load_dataset",
    "normalize_answer",
    "read_results",
    "summarize",
    "support_recall",
    "write_report",
]
