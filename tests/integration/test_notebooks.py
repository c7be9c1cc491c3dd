"""The notebooks run top to bottom: with the fast local model, and against a fake endpoint.

The ``llm`` variant is what CI runs: ``GAPRAG_LOCAL_MODEL=smollm2-135m`` (the embedded
llama.cpp server, started inside the kernel). The fake-endpoint variant checks the plumbing
without any model. Both build their stores with the bundled MiniLM embedder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

nbformat = pytest.importorskip("nbformat", reason="pip install -e '.[dev]'")
nbclient = pytest.importorskip("nbclient", reason="pip install -e '.[dev]'")
pytest.importorskip("ipykernel", reason="pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ["quickstart", "feedback", "own_documents"]
#: LLM calls each notebook makes at least (every one goes to the endpoint)
MIN_CALLS = {"quickstart": 5, "feedback": 5, "own_documents": 2}
CELL_TIMEOUT_S = 900


#: run first in the kernel: a DeprecationWarning that names gaprag (an old name or path kept
#: for one release) fails the cell that triggers it
STRICT_WARNINGS = (
    "import warnings\n"
    "warnings.filterwarnings('error', message=r'(?s).*\\bgaprag\\b', category=DeprecationWarning)"
)


def execute(name: str, workdir: Path) -> Any:
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        "commit notebooks without outputs"
    )
    return run_cells(nb, workdir)


def run_cells(nb: Any, workdir: Path) -> Any:
    """Execute ``nb`` with gaprag's deprecation warnings as errors; returns it with outputs."""
    nb.cells.insert(0, nbformat.v4.new_code_cell(STRICT_WARNINGS))
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()  # raises CellExecutionError with the failing cell's traceback
    return nb


def text_of(nb: Any) -> str:
    parts: list[str] = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts.append(str(output.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def check(name: str, nb: Any) -> None:
    text = text_of(nb)
    if name == "quickstart":
        images = [
            o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})
        ]
        assert len(images) == 1, "the comparison plot is missing"
        assert "stop_reason: answered" in text
        assert "graph TD;" in text and "gaprag_standard_rag" in text
    elif name == "feedback":
        assert "paused before: ('collect_feedback',)" in text
        assert "inserted: p_" in text and "source expert" in text
    else:
        assert "[travel_policy.pdf, page 2]" in text and "logo.png (unknown type .png)" in text
        assert "'num_added': 1, 'num_updated': 1" in text and "embedded: 2" in text


@pytest.mark.llm
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_with_the_local_model(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaprag.llm.registry import MODELS, is_installed

    model = os.environ.get("GAPRAG_LOCAL_MODEL") or "smollm2-135m"
    if not is_installed(MODELS[model]):
        pytest.skip(f"run: gaprag llm install {model}")
    monkeypatch.setenv("GAPRAG_LOCAL_MODEL", model)
    monkeypatch.delenv("GAPRAG_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    check(name, execute(name, tmp_path))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_plumbing_with_a_fake_endpoint(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAI(reply="Gustave Eiffel") as server:
        monkeypatch.setenv("GAPRAG_BASE_URL", server.base_url)
        nb = execute(name, tmp_path)
    check(name, nb)
    assert len(server.requests) >= MIN_CALLS[name]  # every LLM call went to the endpoint


def test_a_gaprag_deprecation_warning_fails_the_notebook(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import warnings\nwarnings.warn('other', DeprecationWarning)"),
        nbformat.v4.new_code_cell(
            "warnings.warn('gaprag.old_module is deprecated: import gaprag.new_module instead',"
            " DeprecationWarning)"
        ),
    ]
    with pytest.raises(nbclient.exceptions.CellExecutionError, match=r"gaprag\.old_module"):
        run_cells(nb, tmp_path)
