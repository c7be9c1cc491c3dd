from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from gaprag.stores.store import Store

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


def pytest_report_header() -> str:
    """The framework versions the run used (gaprag supports any LangGraph 1.x)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    names = ("langgraph", "langchain-core", "langgraph-api")
    return "frameworks: " + ", ".join(f"{n} {installed(n)}" for n in names)


OPERATOR_VARS = (
    "GAPRAG_ALLOWED_ENDPOINTS", "GAPRAG_STORE_ROOT", "GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS",
    "GAPRAG_MAX_BOUNDS", "GAPRAG_RUN_DEADLINE", "GAPRAG_RUN_TOKEN_BUDGET",
    "GAPRAG_FEEDBACK_WRITES", "GAPRAG_STORE", "GAPRAG_FEEDBACK_STORE", "GAPRAG_QA_STORE",
    "GAPRAG_RF_WEIGHTS", "GAPRAG_RERANKER", "GAPRAG_KEYWORDS_BASE_URL", "GAPRAG_KEYWORDS_MODEL",
    "GAPRAG_VALIDATOR_BASE_URL", "GAPRAG_VALIDATOR_MODEL",
)  # fmt: skip


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Each test gets its own GAPRAG_HOME and no configured endpoint, unless it sets one."""
    home = tmp_path_factory.mktemp("gaprag-home")
    monkeypatch.setenv("GAPRAG_HOME", str(home))
    if not os.environ.get("GAPRAG_TEST_KEEP_ENDPOINT"):
        monkeypatch.delenv("GAPRAG_BASE_URL", raising=False)
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for name in OPERATOR_VARS:  # the operator's policy and channels are each test's own
        monkeypatch.delenv(name, raising=False)
    yield home


@pytest.fixture
def tiny_docs() -> list[dict[str, str]]:
    return [
        {"id": "fr", "title": "France", "text": "Paris is the capital and largest city of France."},
        {
            "id": "de",
            "title": "Germany",
            "text": "Berlin is the capital of Germany and its largest city.",
        },
        {
            "id": "eiffel",
            "title": "Eiffel Tower",
            "text": "The Eiffel Tower is a wrought-iron tower in Paris built by Gustave Eiffel.",
        },
        {
            "id": "hamlet",
            "title": "Hamlet",
            "text": "Hamlet is a tragedy written by William Shakespeare around 1600.",
        },
        {
            "id": "shakes",
            "title": "William Shakespeare",
            "text": "William Shakespeare was an English playwright born in Stratford-upon-Avon.",
        },
    ]


@pytest.fixture
def store_docs(tiny_docs: list[dict[str, str]]) -> list[dict[str, str]]:
    """The documents of the ``store`` fixture: ``tiny_docs``; a test module whose tests search
    other documents overrides this fixture."""
    return tiny_docs


@pytest.fixture
def store(tmp_path: Path, store_docs: list[dict[str, str]]) -> Store:
    """A store of ``store_docs`` at ``tmp_path / "store"``, embedded with the hashing embedder
    (no model to load)."""
    from gaprag.stores.embeddings import HashingEmbedder
    from gaprag.stores.store import Store

    return Store.build(tmp_path / "store", store_docs, embedder=HashingEmbedder(), progress=False)
