from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from gaprag.stores.pairs import PairStore
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
    "GAPRAG_ALLOWED_ENDPOINTS", "GAPRAG_ALLOWED_STORES", "GAPRAG_STORE_ROOT",
    "GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS",
    "GAPRAG_MAX_BOUNDS", "GAPRAG_RUN_DEADLINE", "GAPRAG_RUN_TOKEN_BUDGET",
    "GAPRAG_FEEDBACK_WRITES", "GAPRAG_STORE", "GAPRAG_FEEDBACK_STORE", "GAPRAG_QA_STORE",
    "GAPRAG_RF_WEIGHTS", "GAPRAG_RERANKER", "GAPRAG_KEYWORDS_BASE_URL", "GAPRAG_KEYWORDS_MODEL",
    "GAPRAG_VALIDATOR_BASE_URL", "GAPRAG_VALIDATOR_MODEL", "GAPRAG_CLIENT_TOKENS",
    "GAPRAG_CLIENT_TOKENS_FILE", "GAPRAG_OPEN_SERVER", "GAPRAG_CLIENT_ASSISTANTS",
    "GAPRAG_CLIENT_MAX_INFLIGHT",
)  # fmt: skip


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Each test gets its own GAPRAG_HOME and no configured endpoint, unless it sets one; an
    embedded server a test's command starts is stopped at its exit, not kept."""
    home = tmp_path_factory.mktemp("gaprag-home")
    monkeypatch.setenv("GAPRAG_HOME", str(home))
    monkeypatch.setenv("GAPRAG_LOCAL_KEEP_S", "0")
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
def pair_store(tmp_path: Path) -> PairStore:
    """An empty expert-feedback pair store (hashing embedder)."""
    from gaprag.stores.embeddings import HashingEmbedder
    from gaprag.stores.pairs import PairStore

    return PairStore.open(tmp_path / "pairs.sqlite", embedder=HashingEmbedder())


@pytest.fixture
def store(tmp_path: Path, store_docs: list[dict[str, str]]) -> Store:
    """A store of ``store_docs`` at ``tmp_path / "store"``, embedded with the hashing embedder
    (no model to load)."""
    from gaprag.stores.embeddings import HashingEmbedder
    from gaprag.stores.store import Store

    return Store.build(tmp_path / "store", store_docs, embedder=HashingEmbedder(), progress=False)


def pdf_text_ops(text: str) -> str:
    """A page's content stream: ``text``'s lines from the top left, in 11 pt Helvetica."""
    ops = ["BT", "/F1 11 Tf", "14 TL", "72 720 Td"]
    for line in text.split("\n") if text else []:
        ops.append(f"({pdf_escape(line)}) Tj T*")
    return "\n".join([*ops, "ET"])


def pdf_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf_bytes(pages: list[str], title: str | None = None, *, raw: bool = False) -> bytes:
    """A minimal PDF with a text layer: one page per string (lines split on newlines), in
    Helvetica; an empty string makes a page without text, like a scan. ``raw``: each string
    is the page's content stream itself (text placed and lines drawn by PDF operators)."""
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objs.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        stream = (text if raw else pdf_text_ops(text)).encode("latin-1")
        objs.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objs.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    if title:
        objs.append(f"<< /Title ({title}) >>".encode("latin-1"))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    info = f" /Info {len(objs)} 0 R" if title else ""
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R{info} >>\n".encode()
    out += f"startxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


@pytest.fixture
def write_pdf() -> Callable[..., Path]:
    """``write_pdf(path, ["page one text", "page two"], title=None)``: writes a small PDF with
    a text layer (see :func:`pdf_bytes`) and returns its path."""

    def write(path: Path, pages: list[str], title: str | None = None) -> Path:
        path.write_bytes(pdf_bytes(pages, title))
        return path

    return write
