"""Your own documents: loaders per file type, `gaprag index` over folders and files, incremental
updates (only new or changed passages embedded), clean-up, delete, and a store directory that
never loses what gaprag did not write."""

from __future__ import annotations

import json
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from langchain_core.documents import Document as LCDocument

from gaprag.cli import main
from gaprag.errors import InputError, StoreError
from gaprag.stores import HashingEmbedder, Store, load_corpus, load_documents, versions
from gaprag.stores import store as store_module
from gaprag.stores.demo import demo_corpus_path
from gaprag.stores.documents import corpus_hash
from gaprag.stores.embeddings import Vectors
from gaprag.stores.loaders import (
    CSVLoader,
    DocxLoader,
    HTMLLoader,
    MarkdownLoader,
    PDFLoader,
    split_documents,
)

DATA = Path(__file__).resolve().parents[1] / "data"


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__(256)
        self.embedded: list[str] = []

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        self.embedded.extend(texts)
        return super().embed(texts)


@pytest.fixture
def hashing_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """`gaprag index` embeds with the hashing embedder (no model to load)."""
    monkeypatch.setattr(store_module, "default_embedder", lambda: HashingEmbedder())


@pytest.fixture
def wiki(tmp_path: Path, write_pdf: Callable[..., Path]) -> Path:
    """A folder with Markdown, PDF, HTML and CSV files, and two files gaprag cannot index."""
    folder = tmp_path / "wiki"
    (folder / "hr").mkdir(parents=True)
    (folder / "handbook.md").write_text(
        "# Handbook\n\nWelcome to Acme.\n\n## Leave\n\nStaff get 30 days of leave.\n\n"
        "### Carry over\n\nUp to 5 days carry over to March.\n"
    )
    write_pdf(folder / "policy.pdf", ["Travel policy: book trains.", "Hotels up to 120 EUR."])
    write_pdf(folder / "scan.pdf", [""])
    (folder / "hr" / "contacts.html").write_text(
        "<html><head><title>HR contacts</title><style>p{color:red}</style></head>"
        "<body><h1>Contacts</h1><p>Ask Dana Reyes about payroll.</p>"
        "<script>var x = 1;</script></body></html>"
    )
    (folder / "offices.csv").write_text("city,floor,title\nOslo,3,Oslo office\nLima,7,\n")
    (folder / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (folder / ".git").mkdir()
    (folder / ".git" / "config").write_text("[core]\n")
    return folder


# -- JSONL: exactly as before ------------------------------------------------------------------
def test_jsonl_corpora_load_byte_identically_to_before() -> None:
    """Ids, titles and texts of JSONL corpora are what the former reader produced (the shipped
    demo vectors and the committed evaluation stores depend on them)."""
    edge = load_documents([DATA / "jsonl_edge_cases.jsonl"])
    expected = json.loads((DATA / "jsonl_edge_cases.expected.json").read_text())
    assert [{k: d[k] for k in ("id", "title", "text")} for d in edge] == expected
    # hashes of (id, title, text) recorded from the former reader
    assert corpus_hash(load_documents([demo_corpus_path()])) == "a2bc56a417ffa546"
    from gaprag.datasets import resolve

    assert corpus_hash(load_documents([resolve("musique")[1]])) == "55cfe65331c67d0f"


def test_jsonl_extra_fields_are_metadata_and_duplicates_reported(tmp_path: Path) -> None:
    corpus = load_corpus([DATA / "jsonl_edge_cases.jsonl"])
    first = corpus.documents[0]
    assert first["metadata"] == {
        "source": "jsonl_edge_cases.jsonl",
        "url": "https://x/a",
        "department": "hr",
    }
    assert any(
        d.endswith(": a (repeated id: the first is kept)") for d in corpus.duplicates
    )  # the second record with id "a"


def test_json_and_ndjson_are_read_as_jsonl(tmp_path: Path) -> None:
    for suffix in (".json", ".ndjson"):
        path = tmp_path / f"c{suffix}"
        path.write_text('{"id": "x", "text": "one"}\n{"id": "y", "text": "two"}\n')
        assert [d["id"] for d in load_documents([path])] == ["x", "y"]


# -- one loader per type -----------------------------------------------------------------------
def test_markdown_headings_become_title_and_section(wiki: Path) -> None:
    docs = MarkdownLoader(wiki / "handbook.md", "handbook.md").load()
    assert [d.metadata.get("section") for d in docs] == [
        "Handbook",
        "Handbook > Leave",
        "Handbook > Leave > Carry over",
    ]
    assert {d.metadata["title"] for d in docs} == {"Handbook"}
    assert docs[2].page_content == "Up to 5 days carry over to March."
    assert not any("#" in d.page_content for d in docs)


def test_pdf_pages_are_numbered_and_a_scan_is_skipped(wiki: Path) -> None:
    pages = PDFLoader(wiki / "policy.pdf").load()
    assert [(d.metadata["page"], d.page_content) for d in pages] == [
        (1, "Travel policy: book trains."),
        (2, "Hotels up to 120 EUR."),
    ]
    corpus = load_corpus([wiki])
    assert any("scan.pdf (no text layer" in s for s in corpus.skipped)


def test_pdf_title_comes_from_the_pdf(tmp_path: Path, write_pdf: Callable[..., Path]) -> None:
    path = write_pdf(tmp_path / "x.pdf", ["text"], title="Annual report")
    assert PDFLoader(path).load()[0].metadata["title"] == "Annual report"


def test_html_keeps_visible_text_and_the_page_title(wiki: Path) -> None:
    (doc,) = HTMLLoader(wiki / "hr" / "contacts.html", "hr/contacts.html").load()
    assert doc.metadata == {"source": "hr/contacts.html", "title": "Contacts"}
    assert "Ask Dana Reyes about payroll." in doc.page_content
    assert "var x" not in doc.page_content and "color" not in doc.page_content


def test_csv_rows_are_documents(wiki: Path) -> None:
    rows = CSVLoader(wiki / "offices.csv").load()
    assert [(d.metadata["row"], d.metadata["title"], d.page_content) for d in rows] == [
        (1, "Oslo office", "city: Oslo\nfloor: 3"),
        (2, "offices", "city: Lima\nfloor: 7"),
    ]


def test_docx_text(tmp_path: Path) -> None:
    path = tmp_path / "memo.docx"
    ns = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    body = (
        f'<w:document xmlns:w="{ns}"><w:body>'
        "<w:p><w:r><w:t>Quarterly memo</w:t></w:r></w:p>"
        "<w:p><w:r><w:t>Revenue grew by 4 percent.</w:t></w:r></w:p>"
        "</w:body></w:document>"
    )
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("word/document.xml", body)
    (doc,) = DocxLoader(path).load()
    assert doc.page_content.split("\n\n") == ["Quarterly memo", "Revenue grew by 4 percent."]
    assert doc.metadata == {"source": "memo.docx", "title": "memo"}


def test_splitter_keeps_the_word_budget_and_numbers_passages() -> None:
    text = "\n\n".join(" ".join(f"w{p}_{i}" for i in range(60)) for p in range(10))
    doc = LCDocument(page_content=text, metadata={"source": "long.txt", "title": "long"})
    parts = split_documents([doc], chunk_size=200, overlap=40)
    assert len(parts) > 2 and all(len(p.page_content.split()) <= 200 for p in parts)
    assert [p.id for p in parts] == [f"long.txt#{i}" for i in range(len(parts))]
    assert all(p.metadata["id"] == p.id for p in parts)
    with pytest.raises(InputError, match="bad chunking"):
        split_documents([doc], chunk_size=10, overlap=10)


# -- gaprag index --------------------------------------------------------------------------------
def test_index_a_folder_of_four_types_and_report_skips(
    wiki: Path, tmp_path: Path, hashing_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["index", str(wiki), "--store", str(tmp_path / "s"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "scan.pdf: no text layer (a scanned PDF?) (hint: run OCR first" in out
    assert "logo.png: unknown type .png (hint: gaprag reads" in out
    assert ".git" not in out  # hidden folders are not walked
    store = Store.open(tmp_path / "s")
    sources = {d["metadata"]["source"] for d in store.docs}
    assert sources == {"handbook.md", "policy.pdf", "hr/contacts.html", "offices.csv"}
    page2 = store.get("policy.pdf#1")
    assert page2 is not None and page2["metadata"]["page"] == 2
    assert store.search("hotel price limit", 1, mode="bm25")[0]["id"] == "policy.pdf#1"


def test_single_files_of_each_type_and_an_unknown_type_named(
    wiki: Path, tmp_path: Path, hashing_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [wiki / "handbook.md", wiki / "policy.pdf", wiki / "hr" / "contacts.html"]
    assert main(["index", *map(str, files), "--store", str(tmp_path / "s"), "--quiet"]) == 0
    sources = {d["metadata"]["source"] for d in Store.open(tmp_path / "s").docs}
    assert sources == {"handbook.md", "policy.pdf", "contacts.html"}
    assert main(["index", str(wiki / "logo.png"), "--store", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "logo.png: unknown file type .png" in err and "Traceback" not in err
    assert not (tmp_path / "t").exists()


def test_same_relative_path_under_two_folders_keeps_both(
    tmp_path: Path, hashing_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, text in (("a", "Alpha notes about apples."), ("b", "Beta notes about bananas.")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "notes.txt").write_text(text)
    args = [str(tmp_path / "a"), str(tmp_path / "b"), "--store", str(tmp_path / "s"), "--quiet"]
    assert main(["index", *args]) == 0
    assert "notes.txt is in 2 folders" in capsys.readouterr().err
    store = Store.open(tmp_path / "s")
    assert sorted(d["id"] for d in store.docs) == ["a/notes.txt#0", "b/notes.txt#0"]


def test_same_relative_path_indexed_from_two_folders_in_two_runs_keeps_both(
    tmp_path: Path, hashing_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, text in (("a", "Alpha notes about apples."), ("b", "Beta notes about bananas.")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "notes.txt").write_text(text)
    store = str(tmp_path / "s")
    assert main(["index", str(tmp_path / "a"), "--store", store, "--quiet"]) == 0
    assert main(["index", str(tmp_path / "b"), "--store", store, "--quiet"]) == 0
    assert "notes.txt is also in" in capsys.readouterr().err
    assert main(["index", str(tmp_path / "b"), "--store", store, "--quiet"]) == 0  # again
    assert "is up to date" in capsys.readouterr().out
    ids = sorted(d["id"] for d in Store.open(store).docs)
    assert ids == ["b/notes.txt#0", "notes.txt#0"]
    # a folder that was moved is the same source: its passages are updated, not doubled
    (tmp_path / "a").rename(tmp_path / "a2")
    (tmp_path / "a2" / "notes.txt").write_text("Alpha notes about apricots.")
    assert main(["index", str(tmp_path / "a2"), "--store", store, "--quiet"]) == 0
    docs = {d["id"]: d["text"] for d in Store.open(store).docs}
    assert docs == {
        "notes.txt#0": "Alpha notes about apricots.",
        "b/notes.txt#0": "Beta notes about bananas.",
    }


def test_second_run_re_embeds_exactly_the_edited_and_added_files(
    wiki: Path, tmp_path: Path
) -> None:
    root = tmp_path / "s"
    first = CountingEmbedder()
    Store.index(root, load_corpus([wiki]).documents, embedder=first, progress=False)
    assert len(first.embedded) == len(Store.open(root))
    (wiki / "offices.csv").write_text("city,floor,title\nOslo,4,Oslo office\nLima,7,\n")
    (wiki / "faq.txt").write_text("Badges are issued at reception.")
    second = CountingEmbedder()
    corpus = load_corpus([wiki])
    store = Store.index(
        root, corpus.documents, sources=list(corpus.sources), embedder=second, progress=False
    )
    assert sorted(second.embedded) == sorted(
        ["Oslo office: city: Oslo\nfloor: 4", "faq: Badges are issued at reception."]
    )
    assert store.update == {"num_added": 1, "num_updated": 1, "num_deleted": 0, "num_skipped": 7}
    assert store.manifest["embedded"] == 2
    # the unchanged passages kept their vectors, the new ones have theirs, none is left over
    assert store.search("30 days of leave", 1, mode="dense")[0]["id"] == "handbook.md#1"
    assert store.search("badges reception", 1, mode="dense")[0]["id"] == "faq.txt#0"
    assert store.dense_index().collection.count() == len(store)
    # a third run with nothing changed writes no new version and embeds nothing
    third = CountingEmbedder()
    again = Store.index(root, load_corpus([wiki]).documents, embedder=third, progress=False)
    assert third.embedded == [] and again.version_dir == store.version_dir


def test_cleanup_incremental_and_full(wiki: Path, tmp_path: Path) -> None:
    root = tmp_path / "s"
    emb = HashingEmbedder()
    Store.index(root, load_corpus([wiki]).documents, embedder=emb, progress=False)
    # a section removed from a file: incremental removes its passage, keeps other files
    (wiki / "handbook.md").write_text("# Handbook\n\nWelcome to Acme.\n")
    (wiki / "offices.csv").unlink()
    corpus = load_corpus([wiki / "handbook.md"])
    store = Store.index(
        root, corpus.documents, sources=list(corpus.sources), embedder=emb, progress=False
    )
    ids = {d["id"] for d in store.docs}
    assert "handbook.md#1" not in ids and "handbook.md#0" in ids and "offices.csv#0" in ids
    # full: only what this run indexed stays
    store = Store.index(
        root, load_corpus([wiki]).documents, cleanup="full", embedder=emb, progress=False
    )
    assert not any(d["id"].startswith("offices.csv") for d in store.docs)
    assert store.update is not None and store.update["num_deleted"] == 2
    assert store.dense_index().collection.count() == len(store)


def test_cli_second_run_adds_and_reports(
    wiki: Path, tmp_path: Path, hashing_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "s")
    assert main(["index", str(wiki), "--store", store, "--quiet"]) == 0
    (wiki / "faq.txt").write_text("Badges are issued at reception.")
    capsys.readouterr()
    assert main(["index", str(wiki), "--store", store, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "1 added, 0 updated, 0 deleted, 8 unchanged" in out and "1 embedded" in out
    assert main(["index", str(wiki), "--store", store, "--quiet"]) == 0
    assert "is up to date" in capsys.readouterr().out


def test_delete_by_id(
    wiki: Path, tmp_path: Path, hashing_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "s"
    store = Store.index(
        root, load_corpus([wiki]).documents, embedder=HashingEmbedder(), progress=False
    )
    smaller = store.delete(["offices.csv#0"], progress=False)
    assert smaller.get("offices.csv#0") is None and len(smaller) == len(store) - 1
    with pytest.raises(StoreError, match="no document with id nope"):
        smaller.delete(["nope", "offices.csv#1"])
    assert Store.open(root).get("offices.csv#1") is not None  # nothing deleted
    assert main(["index", "--store", str(root), "--delete", "offices.csv#1"]) == 0
    assert Store.open(root).get("offices.csv#1") is None
    assert main(["index", "--store", str(root), "--delete", "nope"]) == 2
    assert "no document with id nope" in capsys.readouterr().err


def test_build_and_add_take_langchain_documents(tmp_path: Path) -> None:
    docs = [
        LCDocument(
            page_content="Oslo is in Norway.", metadata={"title": "Oslo", "source": "x"}, id="oslo"
        ),
        LCDocument(page_content="Lima is in Peru.", metadata={"title": "Lima"}),
    ]
    store = Store.build(tmp_path / "s", docs, embedder=HashingEmbedder(), progress=False)
    oslo = store.get("oslo")
    assert oslo is not None and oslo["title"] == "Oslo" and oslo["metadata"] == {"source": "x"}
    more = store.add([LCDocument(page_content="Rome is in Italy.", id="rome")], progress=False)
    assert len(more) == 3 and more.search("Italy", 1, mode="bm25")[0]["id"] == "rome"
    assert len(store) == 2  # the first object still reads its own version


# -- never delete what gaprag did not write -------------------------------------------------------
def test_a_directory_that_is_not_a_store_is_refused_untouched(
    wiki: Path, tmp_path: Path, hashing_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "target"
    (target / "v-keepme").mkdir(parents=True)
    (target / "v-keepme" / "notes.txt").write_text("mine")
    assert main(["index", str(wiki), "--store", str(target)]) == 2
    err = capsys.readouterr().err
    assert "is not empty and is not a gaprag store: nothing was written" in err
    assert sorted(p.name for p in target.rglob("*")) == ["notes.txt", "v-keepme"]
    with pytest.raises(StoreError, match="not a gaprag store"):
        Store.build(target, [{"id": "a", "title": "", "text": "x"}], embedder=HashingEmbedder())


def test_clean_up_removes_only_versions_the_store_wrote(
    wiki: Path, tmp_path: Path, tiny_docs: list[dict[str, str]]
) -> None:
    root = tmp_path / "s"
    Store.build(root, tiny_docs, embedder=HashingEmbedder(), progress=False).close()
    (root / "v-keepme").mkdir()
    (root / "v-keepme" / "notes.txt").write_text("mine")
    for _ in range(2):
        Store.build(root, tiny_docs[:3], embedder=HashingEmbedder(), progress=False).close()
        base = Store.open(root)
        base.add(load_corpus([wiki]).documents, progress=False).close()
        base.close()
    Store.build(root, tiny_docs, embedder=HashingEmbedder(), progress=False).close()
    assert (root / "v-keepme" / "notes.txt").read_text() == "mine"
    record = versions.read_record(root)
    live = (root / "CURRENT").read_text().strip()
    assert record["versions"] == [live] and "v-keepme" not in record["versions"]


def test_a_store_written_before_the_record_is_still_a_store(
    tmp_path: Path, tiny_docs: list[dict[str, str]]
) -> None:
    root = tmp_path / "s"
    old = Store.build(root, tiny_docs, embedder=HashingEmbedder(), progress=False)
    old.close()
    (root / versions.RECORD).unlink()  # as a store from an earlier gaprag
    (root / "v-old-debris").mkdir()  # not named by the store: left alone
    new = Store.build(root, tiny_docs[:2], embedder=HashingEmbedder(), progress=False)
    assert not old.version_dir.exists() and (root / "v-old-debris").is_dir()
    assert versions.read_record(root)["versions"] == [new.version_dir.name]


# -- concurrency ---------------------------------------------------------------------------------
def test_index_runs_on_one_store_are_serialised(
    tmp_path: Path, tiny_docs: list[dict[str, str]]
) -> None:
    root = tmp_path / "s"
    store = Store.build(root, tiny_docs, embedder=HashingEmbedder(), progress=False)
    done = threading.Event()

    def add() -> None:
        store.add([{"id": "x", "title": "X", "text": "extra"}], progress=False)
        done.set()

    with versions.writing(root):
        worker = threading.Thread(target=add)
        worker.start()
        time.sleep(1.5)
        assert not done.is_set()  # waiting for the lock
    worker.join(30)
    assert done.is_set() and Store.open(root).get("x") is not None


def test_a_later_add_builds_on_the_live_version(
    tmp_path: Path, tiny_docs: list[dict[str, str]]
) -> None:
    root = tmp_path / "s"
    stale = Store.build(root, tiny_docs, embedder=HashingEmbedder(), progress=False)
    Store.open(root).add([{"id": "a", "title": "", "text": "first"}], progress=False)
    latest = stale.add([{"id": "b", "title": "", "text": "second"}], progress=False)
    assert latest.get("a") is not None and latest.get("b") is not None


def test_an_open_reader_keeps_its_version(tmp_path: Path, tiny_docs: list[dict[str, str]]) -> None:
    root = tmp_path / "s"
    reader = Store.build(root, tiny_docs, embedder=HashingEmbedder(), progress=False)
    writer = Store.open(root)
    for i in range(3):
        writer = writer.add([{"id": f"n{i}", "title": "", "text": f"new {i}"}], progress=False)
    assert reader.version_dir.is_dir()
    assert reader.search("Eiffel Tower", 1, mode="dense")[0]["id"] == "eiffel"
    reader.close()
    writer.add([{"id": "last", "title": "", "text": "last"}], progress=False)
    assert not reader.version_dir.exists()


def test_cli_cleanup_full_drops_deleted_files_and_delete_needs_no_paths(
    wiki: Path, tmp_path: Path, hashing_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "s")
    assert main(["index", str(wiki), "--store", store, "--quiet"]) == 0
    (wiki / "offices.csv").unlink()
    assert main(["index", str(wiki), "--store", store, "--quiet"]) == 0  # incremental: kept
    assert Store.open(store).get("offices.csv#0") is not None
    assert main(["index", str(wiki), "--store", store, "--cleanup", "full", "--quiet"]) == 0
    assert "2 deleted" in capsys.readouterr().out
    assert Store.open(store).get("offices.csv#0") is None
    assert main(["index", str(wiki), "--store", store, "--delete", "handbook.md#0"]) == 2
    assert "not both" in capsys.readouterr().err


# -- every file reported, nothing let in silently, nothing lost --------------------------------
def _lines(out: str) -> dict[str, str]:
    """The report's lines by file name: ``{"empty.txt": "skipped   .../empty.txt: empty ..."}``."""
    found = {}
    for line in out.splitlines():
        parts = line.removeprefix("gaprag: ").split(None, 1)
        if len(parts) == 2 and parts[0] in ("indexed", "unchanged", "skipped"):
            name = parts[1].split(":", 1)[0].rsplit("/", 1)[-1]
            found[name] = line
    return found


def test_every_file_gets_one_report_line(
    wiki: Path, tmp_path: Path, hashing_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    (wiki / "empty.txt").write_text("")
    (wiki / "blank.md").write_text("  \n\n")
    (wiki / "latin.txt").write_bytes(
        "Le garçon a mangé une crème brûlée très sucrée.".encode("latin-1")
    )
    store = str(wiki / "store")  # a store inside the folder it indexes
    assert main(["index", str(wiki), "--store", store]) == 0
    assert main(["index", str(wiki), "--store", store]) == 0
    out = capsys.readouterr().out.split("is up to date")[0].split("passages, ")[-1]
    lines = _lines(out)
    files = {"handbook.md", "policy.pdf", "scan.pdf", "contacts.html", "offices.csv",
             "logo.png", "empty.txt", "blank.md", "latin.txt", "store"}  # fmt: skip
    assert set(lines) == files
    assert "skipped" in lines["empty.txt"] and "empty (hint:" in lines["empty.txt"]
    assert "skipped" in lines["blank.md"]
    assert "unchanged" in lines["latin.txt"] and "(read as cp1252)" in lines["latin.txt"]
    assert "a gaprag store: never indexed" in lines["store"]
    assert "unchanged" in lines["handbook.md"] and "3 passage(s)" in lines["handbook.md"]
    texts = [d["text"] for d in Store.open(store).docs]
    assert any("crème brûlée" in t for t in texts)
    assert not any(
        "manifest" in (d.get("metadata") or {}).get("source", "") for d in Store.open(store).docs
    )


def test_a_link_leading_outside_is_reported_not_followed(
    wiki: Path, tmp_path: Path, hashing_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "vault.txt").write_text("The vault code is 4417.")
    (wiki / "vault.txt").symlink_to(outside / "vault.txt")
    (wiki / "linked").symlink_to(outside, target_is_directory=True)
    (wiki / "alias.md").symlink_to(wiki / "handbook.md")  # inside: the same file, once
    store = str(tmp_path / "s")
    assert main(["index", str(wiki), "--store", store]) == 0
    lines = _lines(capsys.readouterr().out)
    assert "symbolic link to a file outside" in lines["vault.txt"]
    assert "--follow-symlinks" in lines["vault.txt"]
    assert "symbolic link to a folder outside" in lines["linked"]
    assert not any("4417" in d["text"] for d in Store.open(store).docs)
    assert main(["index", str(wiki), "--store", store, "--follow-symlinks"]) == 0
    assert any("4417" in d["text"] for d in Store.open(store).docs)


def test_a_file_that_cannot_be_read_keeps_its_passages_under_every_cleanup(
    wiki: Path, tmp_path: Path, hashing_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "s")
    assert main(["index", str(wiki), "--store", store, "--quiet"]) == 0
    before = {d["id"] for d in Store.open(store).docs if d["id"].startswith("policy.pdf")}
    assert before
    (wiki / "policy.pdf").write_bytes(b"%PDF-1.4\n garbage")  # there, but unreadable now
    for cleanup in ("full", "incremental", "none"):
        capsys.readouterr()
        assert main(["index", str(wiki), "--store", store, "--cleanup", cleanup]) == 0
        line = _lines(capsys.readouterr().out)["policy.pdf"]
        assert "skipped" in line and f"its {len(before)} passage(s) in the store are kept" in line
        assert before <= {d["id"] for d in Store.open(store).docs}
    (wiki / "policy.pdf").unlink()  # gone: full clean-up removes it
    assert main(["index", str(wiki), "--store", store, "--cleanup", "full"]) == 0
    assert not before & {d["id"] for d in Store.open(store).docs}


def test_an_unreadable_file_is_reported_with_a_hint(
    wiki: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaprag.stores.loaders import MarkdownLoader as Loader

    def refuse(self: Loader) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Loader, "read_text", refuse)
    corpus = load_corpus([wiki])
    (report,) = [f for f in corpus.files if f.source == "handbook.md"]
    assert report.failed and report.why().startswith("unreadable: Permission denied (hint: check")
    assert corpus.failed == ["handbook.md"]


def test_an_encrypted_docx_is_skipped_as_encrypted(tmp_path: Path) -> None:
    (tmp_path / "locked.docx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600)
    (report,) = load_corpus([tmp_path]).files
    assert report.failed and report.reason.startswith("encrypted")


def test_docx_title_comes_from_its_core_properties(tmp_path: Path) -> None:
    from tests.docset import docx_bytes

    (tmp_path / "h.docx").write_bytes(docx_bytes(["Call +1 555 0100."], title="On-call handbook"))
    (doc,) = DocxLoader(tmp_path / "h.docx").load()
    assert doc.metadata["title"] == "On-call handbook"


def test_large_text_file_is_read_in_blocks_and_warned_about(
    tmp_path: Path,
    hashing_cli: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gaprag.stores.loaders import corpus as corpus_module
    from gaprag.stores.loaders import text as text_module

    monkeypatch.setattr(text_module, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(corpus_module, "LARGE_BYTES", 50_000)
    paragraph = "Gdańsk ferry timetable number {n} leaves pier seven at noon.\n\n"
    (tmp_path / "big.txt").write_text("".join(paragraph.format(n=n) for n in range(1200)))
    blocks = list(text_module.TextLoader(tmp_path / "big.txt").blocks())
    assert len(blocks) > 10 and all(len(b.encode()) <= 2 * 4096 for b in blocks)
    assert "".join(blocks) == (tmp_path / "big.txt").read_text().rstrip()
    assert main(["index", str(tmp_path / "big.txt"), "--store", str(tmp_path / "s")]) == 0
    err = capsys.readouterr().err
    assert "big.txt is large" in err and "passages; embedding them with MiniLM takes about" in err
    texts = " ".join(d["text"] for d in Store.open(tmp_path / "s").docs)
    assert all(f"number {n} leaves" in texts for n in (0, 599, 1199))


def test_a_file_split_as_it_is_read_gives_the_passages_of_splitting_its_blocks_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block is split as it is read, the numbering carried on: the same passages and ids
    as splitting every block of the file at once."""
    from gaprag.stores.documents import from_langchain
    from gaprag.stores.loaders import corpus as corpus_module
    from gaprag.stores.loaders import text as text_module

    monkeypatch.setattr(text_module, "BLOCK_BYTES", 4096)
    words = " ".join(f"w{n}" for n in range(90))
    (tmp_path / "big.txt").write_text("".join(f"Part {n}. {words}\n\n" for n in range(300)))
    blocks = list(text_module.TextLoader(tmp_path / "big.txt", "big.txt").lazy_load())
    whole = [from_langchain(d) for d in corpus_module.split_documents(blocks)]
    got = load_corpus([tmp_path / "big.txt"]).documents
    assert len(blocks) > 5 and got == whole
    assert [d["id"] for d in got] == [f"big.txt#{n}" for n in range(len(got))]


def test_the_large_file_estimate_does_not_load_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from gaprag.stores.embeddings import minilm_rate; "
        "assert minilm_rate() > 0; assert 'torch' not in sys.modules, 'torch loaded'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-500:]
