"""An evaluation's options, declared once: :class:`EvalSettings`.

``gaprag eval`` builds one from its flags (its defaults are the fields' defaults),
:func:`gaprag.eval.evaluate` from its keywords, and :func:`gaprag.eval.runner.plan_run` plans
the run from it, as DSPy's ``Evaluate`` holds its settings once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from gaprag.datasets import Dataset
from gaprag.eval.planning import VariantSpecs
from gaprag.llm.client import LLM
from gaprag.stores.embeddings import Embedder


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalSettings:
    """What to evaluate, on which questions, with which model, where it writes and how it runs.

    Every field is a keyword of :func:`gaprag.eval.evaluate`; ``gaprag eval``'s flags set the
    same fields (``--quiet`` is ``progress=False``).
    """

    methods: str | Sequence[str]
    """Method names or variant names: a list, or one comma-separated string."""
    dataset: str | Path | Dataset
    """A bundled name (``hotpotqa``), a dataset JSONL path, or a :class:`Dataset`."""
    limit: int | None = None
    """Evaluate the first ``limit`` questions in file order from ``offset`` (None: all)."""
    offset: int = 0
    """Skip this many questions first."""
    out: str | Path = "gaprag-eval"
    """The output directory: results.jsonl, traces/, run.json and the report."""
    concurrency: int = 1
    """Questions in flight at once."""
    resume: bool = False
    """Skip (method, id) pairs already answered in ``out/results.jsonl``."""
    max_errors: int = 10
    """Stop after this many failed questions (0: never); rows written so far are kept."""
    sets: Sequence[str] = ()
    """Method options as ``--set`` strings, ``[METHOD.]KEY=VALUE``."""
    options: Mapping[str, Mapping[str, Any]] | None = None
    """Per-method settings, ``{"migres": {"max_iterations": 3}}`` (win over ``sets``)."""
    variants: VariantSpecs | None = None
    """Named variants of a method, each its own method key in the results:
    ``["ik_hybrid=iterkey:top_k=5,retrieval_mode=hybrid"]`` (the ``--variant`` syntax) or
    ``{"ik_hybrid": ("iterkey", {"top_k": 5})}``."""
    llm: LLM | BaseChatModel | None = None
    """A chat model (default: ``base_url``/``model``, else the configured endpoint or the
    embedded server, started in its repeatable serving mode)."""
    base_url: str | None = None
    """An OpenAI-compatible endpoint."""
    model: str | None = None
    """The model name sent to ``base_url``."""
    store: Any = None
    """A prebuilt store, a store directory, or any retriever (default: the dataset's paragraph
    union, built once under ``GAPRAG_HOME`` with ``embedder``)."""
    embedder: Embedder | None = None
    """The embedder the dataset's store is built with (default: the shipped one)."""
    progress: bool = True
    """Show a progress bar on stderr."""
    report: bool = True
    """Write summary.json, summary.md, the plots and report.html after the run."""
    seed: int = 0
    """The bootstrap seed of the summary."""
    reuse: bool | None = None
    """Answer a request identical to one already answered for the same question in this run
    (by another method) from the run's per-question store instead of sending it again; rows
    still count it as sent. None: on under repeatable serving (the default model), else off
    (``--no-reuse``: off)."""


def default(name: str) -> Any:
    """The default of the :class:`EvalSettings` field ``name`` (what a flag left out means)."""
    found = {f.name: f for f in dataclasses.fields(EvalSettings)}[name]
    if found.default is dataclasses.MISSING:
        raise KeyError(f"EvalSettings.{name} has no default")
    return found.default


def settings_of(settings: EvalSettings | None, options: Mapping[str, Any]) -> EvalSettings:
    """``settings`` with ``options`` (keywords of :class:`EvalSettings`) put over it, or the
    settings ``options`` alone give."""
    if settings is None:
        return EvalSettings(**options)
    return dataclasses.replace(settings, **options)
