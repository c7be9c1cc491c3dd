"""Passage metadata end to end: kept by the store, carried by evidence, narrowed by filters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gaprag import build_graph
from gaprag.errors import InputError
from gaprag.graphs import ITERATIVE, METHODS
from gaprag.llm.client import LLM
from gaprag.stores import HashingEmbedder, Store, load_documents
from gaprag.stores.documents import Document, load_jsonl
from gaprag.stores.filters import MAX_KEYS, check_filter, chroma_where, matches
from gaprag.stores.retriever import GapragRetriever
from gaprag.testing import ScriptedChatModel, scripted

HR = {"source": "hr/leave.md", "page": 2, "department": "hr"}
IT = {"source": "it/vpn.md", "page": 1, "department": "it"}


@pytest.fixture
def store_docs() -> list[Document]:
    """Two departments' passages on the same words, so only a filter tells them apart."""
    return [
        {"id": "hr1", "title": "Leave", "text": "Annual leave is 25 days for every employee.",
         "metadata": HR},
        {"id": "hr2", "title": "Sick leave", "text": "Sick leave needs a note after 3 days.",
         "metadata": {**HR, "page": 3}},
        {"id": "it1", "title": "Leave VPN", "text": "Leave the VPN on when you work remotely "
         "for more than 25 days.", "metadata": IT},
        {"id": "it2", "title": "Laptops", "text": "Every employee gets a laptop on day one.",
         "metadata": {**IT, "page": 4}},
        {"id": "plain", "title": "Old", "text": "An employee passage without metadata: leave."},
    ]  # fmt: skip


def test_jsonl_extra_fields_become_metadata(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    rows = [{"id": "a", "title": "T", "text": "alpha", "url": "https://x/a", "department": "hr"}]
    corpus.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (doc,) = load_documents([corpus])
    assert (doc["id"], doc["title"], doc["text"]) == ("a", "T", "alpha")
    assert doc["metadata"] == {"url": "https://x/a", "department": "hr", "source": "c.jsonl"}


def test_a_plain_jsonl_record_has_only_its_source(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "title": "T", "text": "alpha"}\n')
    assert load_jsonl(corpus) == [{"id": "a", "title": "T", "text": "alpha"}]
    assert load_documents([corpus]) == [
        {"id": "a", "title": "T", "text": "alpha", "metadata": {"source": "c.jsonl"}}
    ]


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_evidence_carries_the_passage_metadata(store: Store, mode: Any) -> None:
    hits = {h["id"]: h for h in store.search("annual leave employee", 5, mode=mode)}
    assert hits["hr1"]["metadata"] == HR and hits["hr1"]["source"] == mode
    assert "metadata" not in hits.get("plain", {"id": "plain"})


def test_metadata_survives_reopening(store: Store) -> None:
    again = Store.open(store.root, embedder=HashingEmbedder())
    assert again.get("it2") == {**store.get("it2"), "metadata": {**IT, "page": 4}}  # type: ignore[dict-item]


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_a_filter_keeps_only_matching_passages(store: Store, mode: Any) -> None:
    hits = store.search("leave days employee", 5, mode=mode, filter={"department": "it"})
    assert {h["id"] for h in hits} == {"it1", "it2"}
    hits = store.search("leave days", 5, mode=mode, filter={"department": "hr", "page": 3})
    assert [h["id"] for h in hits] == ["hr2"]
    hits = store.search("leave", 5, mode=mode, filter={"page": [1, 3]})
    assert {h["id"] for h in hits} == {"it1", "hr2"}


def test_bm25_fetches_deeper_until_enough_passages_match(tmp_path: Path) -> None:
    docs: list[Document] = [
        {"id": f"n{i}", "title": "", "text": "leave leave leave policy", "metadata": {"d": "x"}}
        for i in range(120)
    ]
    docs.append({"id": "far", "title": "", "text": "leave policy of another department",
                 "metadata": {"d": "y"}})  # fmt: skip
    st = Store.build(tmp_path / "s", docs, embedder=HashingEmbedder(), progress=False)
    assert [h["id"] for h in st.search("leave", 3, mode="bm25", filter={"d": "y"})] == ["far"]


def test_updates_carry_metadata_into_chroma(tmp_path: Path, store_docs: list[Document]) -> None:
    """An update edits a copy of the Chroma collection: added and changed passages keep their
    metadata there, so the dense side filters them like the rest."""
    st = Store.build(tmp_path / "s", store_docs, embedder=HashingEmbedder(), progress=False)
    new: Document = {"id": "fin1", "title": "Budget", "text": "Leave travel costs in the budget.",
                     "metadata": {"source": "fin/budget.md", "department": "finance"}}  # fmt: skip
    moved: Document = {**store_docs[3], "metadata": {**IT, "page": 4, "department": "finance"}}
    st2 = st.add([new, moved])
    assert st2.update == {"num_added": 1, "num_updated": 1, "num_deleted": 0, "num_skipped": 0}
    for mode in ("dense", "bm25", "hybrid"):
        hits = st2.search("leave budget laptop", 5, mode=mode, filter={"department": "finance"})
        assert {h["id"] for h in hits} == {"fin1", "it2"}, mode
    assert Store.open(st2.root, embedder=HashingEmbedder()).get("fin1") == new
    st3 = st2.delete(["fin1"])
    hits = st3.search("leave budget", 5, mode="dense", filter={"department": "finance"})
    assert [h["id"] for h in hits] == ["it2"]


def test_filters_are_checked_and_bounded() -> None:
    assert check_filter({"department": "hr", "page": [1, 2]}) == {
        "department": "hr",
        "page": [1, 2],
    }
    bad: Any
    for bad in ({"k": {"nested": 1}}, {"": "x"}, {"k": []}, {"k": "x" * 300}, ["k"],
                {f"k{i}": 1 for i in range(MAX_KEYS + 1)}):  # fmt: skip
        with pytest.raises(InputError):
            check_filter(bad)


def test_a_boolean_filter_matches_booleans_only() -> None:
    assert matches({"public": True}, {"public": True})
    assert not matches({"public": 1}, {"public": True})
    assert chroma_where({"a": 1, "b": ["x", "y"]}) == {
        "$and": [{"a": 1}, {"b": {"$in": ["x", "y"]}}]
    }


def test_the_run_setting_filters_every_search_of_a_method(store: Store) -> None:
    graph = build_graph("standard_rag", llm=scripted(default="25 days"), retriever=store, top_k=5)
    out = graph.invoke(
        {"question": "How many days of leave?"}, context={"filter": {"department": "hr"}}
    )
    assert {e["id"] for e in out["evidence"]} == {"hr1", "hr2"}
    assert all(e["metadata"]["department"] == "hr" for e in out["evidence"])
    unfiltered = graph.invoke({"question": "How many days of leave?"})
    assert len(unfiltered["evidence"]) == 5


@pytest.mark.parametrize(
    "where",
    [{"$and": [{"department": "hr"}]}, {"$or": [{"a": 1}, {"b": 2}]}, {"$ne": "hr"},
     {"department": "hr", "$where": "1"}],
)  # fmt: skip
def test_an_operator_key_is_refused_by_gaprag_with_the_supported_form(where: Any) -> None:
    with pytest.raises(InputError, match="operators are not supported") as err:
        check_filter(where)
    assert "\n" not in err.value.message and 'filter={"department": "hr"}' in err.value.hint


def test_a_bad_filter_is_refused_before_the_run(store: Store) -> None:
    graph = build_graph("standard_rag", llm=scripted(default="x"), retriever=store)
    with pytest.raises(InputError, match="filter"):
        graph.invoke({"question": "q?"}, context={"filter": {"department": {"$ne": "hr"}}})


@pytest.mark.parametrize("method", ["iterkey", "migres"])
@pytest.mark.parametrize(
    ("gate", "stop"), [("agreement", "gate_confident"), ("off", "max_iterations")]
)
def test_the_gate_and_the_loop_search_within_the_filter(
    store: Store, method: str, gate: str, stop: str
) -> None:
    assert method in ITERATIVE
    model = ScriptedChatModel(default="Unknown")
    graph = build_graph(
        method, llm=LLM(model, supports_logprobs=False), retriever=store, gate=gate,
        max_iterations=1, filter={"department": "it"},
    )  # fmt: skip
    out = graph.invoke({"question": "How many days of leave?"})
    assert out["stop_reason"] == stop  # the gate's search, or the loop's
    assert out["retrieved_ids"] and set(out["retrieved_ids"]) <= {"it1", "it2"}


def test_absolute_source_paths_are_not_shown(tmp_path: Path) -> None:
    docs: list[Document] = [
        {"id": "a", "title": "", "text": "alpha beta", "metadata": {"source": "/srv/data/a.md"}},
        {"id": "u", "title": "", "text": "alpha gamma", "metadata": {"source": "https://x/u"}},
    ]
    st = Store.build(tmp_path / "s", docs, embedder=HashingEmbedder(), progress=False)
    sources = {h["id"]: h["metadata"]["source"] for h in st.search("alpha", 2, mode="bm25")}
    assert sources == {"a": "a.md", "u": "https://x/u"}


def test_a_store_built_without_metadata_opens_and_filters_to_nothing(
    tmp_path: Path, tiny_docs: list[Document]
) -> None:
    st = Store.build(tmp_path / "old", tiny_docs, embedder=HashingEmbedder(), progress=False)
    again = Store.open(st.root, embedder=HashingEmbedder())
    hits = again.search("Paris", 2)
    assert hits and all("metadata" not in h for h in hits)
    assert again.search("Paris", 2, filter={"department": "hr"}) == []


def test_the_gaprag_retriever_returns_metadata_and_filters(store: Store) -> None:
    lc = GapragRetriever(store=store, k=3, mode="bm25")
    docs = lc.invoke("leave days", filter={"department": "hr"})
    assert {d.id for d in docs} == {"hr1", "hr2"}
    first = next(d for d in docs if d.id == "hr1")
    assert first.metadata["source"] == "hr/leave.md" and first.metadata["page"] == 2
    assert first.metadata["id"] == "hr1" and first.metadata["title"] == "Leave"


def test_ask_json_shows_sources_and_pages_and_filters(
    tmp_path: Path,
    store_docs: list[Document],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gaprag.cli import main
    from tests.fake_openai import FakeOpenAI

    corpus = tmp_path / "c.jsonl"
    rows = [
        {k: v for k, v in d.items() if k != "metadata"} | d.get("metadata", {}) for d in store_docs
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(tmp_path / "s")
    assert (
        main(["index", str(corpus), "--store", store, "--embedder", "hashing-64", "--quiet"]) == 0
    )
    with FakeOpenAI(reply="25 days") as server:
        monkeypatch.setenv("GAPRAG_BASE_URL", server.base_url)
        capsys.readouterr()
        args = [
            "ask",
            "How many days of leave?",
            "--store",
            store,
            "--json",
            "--filter",
            "department=hr",
        ]
        assert main(args) == 0, capsys.readouterr().err
        out = json.loads(capsys.readouterr().out)
        assert main([a for a in args if a != "--json"]) == 0
        text = capsys.readouterr().err
    origins = {e["id"]: (e["metadata"]["source"], e["metadata"]["page"]) for e in out["evidence"]}
    assert origins == {"hr1": ("hr/leave.md", 2), "hr2": ("hr/leave.md", 3)}
    assert out["settings"]["filter"] == {"value": {"department": "hr"}, "source": "explicit"}
    assert "hr/leave.md p. 2)" in text and "it/vpn.md" not in text


def test_the_tool_result_cites_source_and_page(store: Store) -> None:
    from gaprag.tool import compact_result, format_result

    out = build_graph("standard_rag", llm=scripted(default="25 days"), retriever=store).invoke(
        {"question": "annual leave"}, context={"filter": {"source": "hr/leave.md"}, "top_k": 1}
    )
    compact = compact_result(out)
    assert compact["evidence"][0]["metadata"]["source"] == "hr/leave.md"
    assert "] Leave (hr/leave.md, p. 2): Annual leave" in format_result(compact)


def test_migres_facts_keep_the_metadata_of_their_passages(tmp_path: Path) -> None:
    from tests.methods import migres as tm

    docs = [{**d, "metadata": {"source": f"films/{d['id']}.md"}} for d in tm.LEVITY]
    st = Store.build(tmp_path / "s", docs, embedder=HashingEmbedder(), progress=False)  # type: ignore[arg-type]
    leaf = tm.leaf_json(("Levity was directed by Ed Solomon.", [0]))
    rules = [
        (tm.LEAF, leaf),
        (tm.MAIN, tm.UNANSWERABLE),
        (tm.QUERY, "x"),
        (tm.FINAL, tm.FINAL_REPLY),
    ]
    out, _ = tm.run(st, rules, max_iterations=1)
    assert out["evidence"]
    assert all(e["metadata"]["source"] == f"films/{e['id']}.md" for e in out["evidence"])


def test_rfm_rag_facts_list_the_metadata_of_their_passages(store: Store) -> None:
    out = build_graph("rfm_rag", llm=scripted(default="25 days"), retriever=store).invoke(
        {"question": "How many days of annual leave?"}, context={"filter": {"department": "hr"}}
    )
    (fact,) = out["evidence"]
    assert fact["source"] == "llm"
    assert fact["metadata"]["sources"] == [HR, {**HR, "page": 3}]


@pytest.mark.parametrize(
    "method", ["standard_rag", "missing_knowledge", "iterkey", "rag_ef", "ircot"]
)
def test_every_passage_method_returns_its_passages_metadata(store: Store, method: str) -> None:
    out = build_graph(method, llm=scripted(default="25 days"), retriever=store).invoke(
        {"question": "How many days of annual leave?"}
    )
    assert out["evidence"]
    for e in out["evidence"]:
        assert e.get("metadata") == store.get(e["id"]).get("metadata"), e["id"]  # type: ignore[union-attr]


def test_set_and_filter_flags_read_a_filter() -> None:
    from gaprag.options import options_for, parse_filter, parse_sets

    sets = parse_sets(['filter={"department": "hr", "page": [1, 2]}'], "standard_rag")
    assert options_for("standard_rag", sets) == {"filter": {"department": "hr", "page": [1, 2]}}
    assert parse_filter(["department=hr", "page=3", "source=a.md", "source=b.md"]) == {
        "department": "hr", "page": 3, "source": ["a.md", "b.md"],
    }  # fmt: skip
    with pytest.raises(InputError, match="filter"):
        options_for("standard_rag", parse_sets(["filter=department=hr"], "standard_rag"))
    with pytest.raises(InputError, match="--filter expects KEY=VALUE"):
        parse_filter(["department"])


def test_studios_form_shows_the_filter_and_its_build_time_value() -> None:
    plain = build_graph("standard_rag", llm=scripted()).get_context_jsonschema()
    built = build_graph("standard_rag", llm=scripted(), filter={"department": "hr"})
    assert plain is not None and plain["properties"]["filter"]["default"] == {}
    schema = built.get_context_jsonschema()
    assert schema is not None and schema["properties"]["filter"]["default"] == {"department": "hr"}


# -- a filter that keeps nothing ---------------------------------------------------------------
@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("where", [{"department": "legal"}, {"page": ""}])
def test_a_filter_matching_no_passage_stops_without_a_model_call(
    store: Store, method: str, where: dict[str, Any]
) -> None:
    model = ScriptedChatModel(default="25 days")
    graph = build_graph(method, llm=LLM(model, supports_logprobs=False), retriever=store)
    out = graph.invoke({"question": "How many days of leave?"}, context={"filter": where})
    assert out["stop_reason"] == "no_matching_passages"
    assert out["usage"]["llm_calls"] == 0 and not out.get("evidence")
    assert not out.get("answer")


def test_an_unknown_filter_key_is_refused_with_the_stores_keys(store: Store) -> None:
    graph = build_graph("iterkey", llm=scripted(default="x"), retriever=store)
    with pytest.raises(InputError, match=r"metadata key\(s\) color") as err:
        graph.invoke({"question": "q?"}, context={"filter": {"color": "teal"}})
    assert err.value.hint == "filter on the keys the store has: department, page, source"


def test_a_served_caller_gets_no_match_without_the_stores_keys(store: Store) -> None:
    from gaprag.operator import OperatorPolicy

    graph = build_graph(
        "standard_rag", llm=scripted(default="x"), retriever=store,
        policy=OperatorPolicy(hide_paths=True),
    )  # fmt: skip
    out = graph.invoke({"question": "q?"}, context={"filter": {"color": "teal"}})
    assert out["stop_reason"] == "no_matching_passages" and out["usage"]["llm_calls"] == 0


def test_csv_columns_are_filterable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaprag.cli import main
    from gaprag.stores import store as store_module

    monkeypatch.setattr(store_module, "default_embedder", lambda: HashingEmbedder())
    (tmp_path / "staff.csv").write_text(
        "name,department,floor\nAnna,Legal,3\nBen,Finance,4\nCleo,Legal,5\n"
    )
    assert main(["index", str(tmp_path / "staff.csv"), "--store", str(tmp_path / "s")]) == 0
    st = Store.open(tmp_path / "s", embedder=HashingEmbedder())
    hits = st.search("name department", 5, mode="bm25", filter={"department": "Legal"})
    assert sorted(h["metadata"]["name"] for h in hits) == ["Anna", "Cleo"]
    assert [h["metadata"]["name"] for h in st.search("name floor", 5, filter={"floor": 4})] == [
        "Ben"
    ]
