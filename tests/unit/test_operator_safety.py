"""A graph cannot be turned against its operator: tried as a run's caller would.

Whoever starts a run sets its ``context``; the operator (whoever builds the graph, and the
environment) owns endpoints, models, paths and spend. Every attack here must be refused before
anything runs, or be bounded, unless the operator allowed it.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from gaprag import build_graph, list_methods
from gaprag.context import effective_settings
from gaprag.deps import CACHE_SIZE, Deps
from gaprag.errors import GapragError, InputError, StoreError
from gaprag.graphs import ITERATIVE
from gaprag.operator import HIDDEN_PATH, AllowedEndpoint, OperatorPolicy
from gaprag.stores.embeddings import HashingEmbedder
from gaprag.stores.pairs import PairStore
from gaprag.stores.store import Store
from gaprag.testing import ScriptedChatModel
from tests.fake_openai import FakeOpenAI

SECRET = "sk-operator-secret-0123456789"
Q = "Who built the Eiffel Tower?"
METHODS = list_methods()
#: the methods with a loop an operator's deadline or token budget can cut
LOOPING = list(ITERATIVE)
#: (method, setting) for every operator path setting
PATHS = [
    ("standard_rag", "store"),
    ("rag_ef", "feedback_store"),
    ("missing_knowledge", "qa_store"),
    ("rfm_rag", "rf_weights"),
    ("migres", "reranker"),
]
#: build-time settings that keep each method off model loads (a hashing store, no MLP)
QUIET = {"rfm_rag": {"feedback_mode": "never_sufficient"}}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    out = tmp_path / "root"
    out.mkdir()
    return out


@pytest.fixture
def store_in_root(root: Path, tiny_docs: list[dict[str, str]]) -> Store:
    """A store of ``tiny_docs`` inside ``root``, the folder a policy names as the store root."""
    return Store.build(root / "store", tiny_docs, embedder=HashingEmbedder(), progress=False)


@pytest.fixture
def recorder() -> Any:
    with FakeOpenAI(reply="Gustave Eiffel") as server:
        yield server


def model(default: str = "Gustave Eiffel") -> ScriptedChatModel:
    return ScriptedChatModel(default=default)


def graph(method: str, store: Store | None, **options: Any) -> Any:
    return build_graph(
        method, llm=options.pop("llm", None) or model(), retriever=store,
        **{**QUIET.get(method, {}), **options},
    )  # fmt: skip


# -- endpoints and keys ----------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
def test_runtime_endpoint_is_refused_and_receives_nothing(
    method: str, store_in_root: Store, recorder: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    g = build_graph(method, retriever=store_in_root, **QUIET.get(method, {}))
    with pytest.raises(InputError, match=r"base_url=.* operator's setting"):
        g.invoke({"question": Q}, context={"base_url": recorder.base_url, "model": "m"})
    assert recorder.requests == []


@pytest.mark.parametrize("name", ["keywords_base_url", "validator_base_url"])
def test_iterkey_role_endpoints_are_refused(
    name: str, store_in_root: Store, recorder: FakeOpenAI
) -> None:
    with pytest.raises(InputError, match=name):
        graph("iterkey", store_in_root).invoke({"question": Q}, context={name: recorder.base_url})
    assert recorder.requests == []


def test_allowed_runtime_endpoint_gets_no_operator_key(
    store_in_root: Store, recorder: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    policy = OperatorPolicy(allowed_endpoints=(AllowedEndpoint(recorder.base_url),))
    g = build_graph("standard_rag", retriever=store_in_root, policy=policy)
    context = {"base_url": recorder.base_url, "model": "m", "retrieval_mode": "bm25"}
    out = g.invoke({"question": Q}, context=context)
    assert out["answer"] == "Gustave Eiffel"
    assert recorder.headers, "the allowed endpoint was used"
    assert all(SECRET not in h["authorization"] for h in recorder.headers)


def test_allowed_runtime_endpoint_asked_for_its_model_gets_no_operator_key(
    store_in_root: Store, recorder: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    policy = OperatorPolicy(allowed_endpoints=(AllowedEndpoint(recorder.base_url),))
    g = build_graph("standard_rag", retriever=store_in_root, policy=policy)
    g.invoke({"question": Q}, context={"base_url": recorder.base_url, "retrieval_mode": "bm25"})
    assert recorder.model_lookups == 1, "no model named: the endpoint was asked for its model"
    assert all(SECRET not in h.get("authorization", "") for h in recorder.headers)


def test_allowed_endpoint_gets_the_key_tied_to_its_prefix(
    store_in_root: Store, recorder: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("LOCAL_KEY", "sk-tied-to-loopback-42")
    monkeypatch.setenv("GAPRAG_ALLOWED_ENDPOINTS", f"http://127.0.0.1:{recorder.port}=LOCAL_KEY")
    g = build_graph("standard_rag", retriever=store_in_root)  # the policy from the environment
    g.invoke({"question": Q}, context={"base_url": recorder.base_url, "retrieval_mode": "bm25"})
    assert {h["authorization"] for h in recorder.headers} == {"Bearer sk-tied-to-loopback-42"}


def _under_allowed(port: int) -> list[str]:
    """Spellings of an endpoint under ``http://127.0.0.1:PORT/v1``."""
    return [
        f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{port}/v1/", f"HTTP://127.0.0.1:{port}/v1",
        f"http://127.0.0.1:{port}/v1/chat/../", f"http://127.0.0.1:{port}/v1/sub",
    ]  # fmt: skip


def _not_under_allowed(port: int) -> list[str]:
    """URLs that start with the text ``http://127.0.0.1:PORT/v1`` or name it, and send
    requests elsewhere."""
    return [
        f"http://127.0.0.1:{port}/v10", f"https://127.0.0.1:{port}/v1", f"http://localhost:{port}/v1",
        f"http://127.0.0.1:{port}/v1/../v2", f"http://127.0.0.1:{port}/v1%2f..%2fv2",
        f"http://127.0.0.1:{port}/v1@127.0.0.1:1/v1", f"http://user:pw@127.0.0.1:{port}/v1",
        f"http://127.0.0.1:{port}\\@127.0.0.1:1/v1", f"http://127.0.0.1:{port}0/v1",
        f" http://127.0.0.1:{port}/v1", "file:///etc/passwd", "",
    ]  # fmt: skip


def test_allow_list_compares_parsed_urls() -> None:
    entry = AllowedEndpoint("http://127.0.0.1:1801/v1")
    assert all(entry.holds(url) for url in _under_allowed(1801))
    assert not any(entry.holds(url) for url in _not_under_allowed(1801))
    assert AllowedEndpoint("https://api.example.com").holds("https://API.example.com:443/v1/x")
    assert not AllowedEndpoint("https://api.example.com").holds("https://api.example.com.evil/v1")


@pytest.mark.parametrize(
    "entry", ["127.0.0.1:1801", "ftp://127.0.0.1/", "http://u:p@127.0.0.1:1801/", "http://:80/"]
)
def test_allow_list_entry_that_is_no_http_prefix_is_refused(
    entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_ALLOWED_ENDPOINTS", f"http://127.0.0.1:1801/v1,{entry}")
    with pytest.raises(GapragError, match=r"GAPRAG_ALLOWED_ENDPOINTS: .* not an http"):
        OperatorPolicy.from_env()


def test_endpoint_sharing_the_allowed_text_gets_neither_key_nor_requests(
    store_in_root: Store, recorder: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``http://127.0.0.1:1801=TIED_KEY`` allows neither port 18011 nor a URL whose user
    information spells the allowed prefix (``http://127.0.0.1:1801@127.0.0.1:18011/v1``)."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("TIED_KEY", "sk-tied-42")
    prefix = f"http://127.0.0.1:{recorder.port // 10}"  # the recorder's URL starts with it
    assert recorder.base_url.startswith(prefix)
    monkeypatch.setenv("GAPRAG_ALLOWED_ENDPOINTS", f"{prefix}=TIED_KEY")
    g = build_graph("standard_rag", retriever=store_in_root)
    userinfo = recorder.base_url.replace("http://", f"{prefix}@")
    for url in (recorder.base_url, userinfo):
        with pytest.raises(InputError, match=r"base_url=.* operator's setting"):
            g.invoke({"question": Q}, context={"base_url": url, "retrieval_mode": "bm25"})
    assert recorder.requests == []


def test_operator_endpoint_gets_the_operator_key(
    store_in_root: Store, recorder: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("GAPRAG_BASE_URL", recorder.base_url)
    g = build_graph("standard_rag", retriever=store_in_root)
    # naming the operator's own endpoint at run time is no change
    g.invoke({"question": Q}, context={"base_url": recorder.base_url, "retrieval_mode": "bm25"})
    assert {h["authorization"] for h in recorder.headers} == {f"Bearer {SECRET}"}


def test_runtime_keyword_endpoint_never_replaces_the_injected_llm(
    store_in_root: Store, recorder: FakeOpenAI
) -> None:
    injected = model("Gustave Eiffel")
    dev = OperatorPolicy(dev_allow_runtime_settings=True)
    g = build_graph("iterkey", llm=injected, retriever=store_in_root, policy=dev, max_iterations=1)
    context = {"keywords_base_url": recorder.base_url, "validator_base_url": recorder.base_url}
    g.invoke({"question": Q}, context=context)
    assert recorder.requests == [] and injected.calls


def test_runtime_model_needs_an_allowed_runtime_endpoint(store_in_root: Store) -> None:
    with pytest.raises(InputError, match="model='gpt-expensive'"):
        graph("standard_rag", store_in_root).invoke(
            {"question": Q}, context={"model": "gpt-expensive"}
        )


# -- paths -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "name"), PATHS)
def test_runtime_path_without_a_root_is_refused(
    method: str, name: str, store_in_root: Store
) -> None:
    with pytest.raises(InputError, match=rf"{name}=.* operator's setting"):
        graph(method, store_in_root).invoke(
            {"question": Q}, context={name: str(store_in_root.root)}
        )


@pytest.mark.parametrize(("method", "name"), PATHS)
def test_runtime_path_escaping_the_root_is_refused_and_nothing_is_created(
    method: str, name: str, store_in_root: Store, root: Path, tmp_path: Path
) -> None:
    policy = OperatorPolicy(store_root=root)
    outside = tmp_path / "outside" / "made.sqlite"
    for value in ("../../..", str(outside), f"{root}/../outside/made.sqlite"):
        with pytest.raises(InputError, match="outside the store root"):
            graph(method, store_in_root, policy=policy).invoke(
                {"question": Q}, context={name: value}
            )
    assert not (tmp_path / "outside").exists()


def test_symlinked_store_escaping_the_root_is_refused(
    root: Path, tmp_path: Path, tiny_docs: list[dict[str, str]]
) -> None:
    elsewhere = Store.build(tmp_path / "elsewhere", tiny_docs, embedder=HashingEmbedder(),
                            progress=False)  # fmt: skip
    (root / "link").symlink_to(elsewhere.root, target_is_directory=True)
    g = build_graph("standard_rag", llm=model(), policy=OperatorPolicy(store_root=root))
    with pytest.raises(InputError, match="outside the store root"):
        g.invoke({"question": Q}, context={"store": "link", "retrieval_mode": "bm25"})


def test_symlinked_stores_inside_the_root_are_served_off_the_event_loop(
    root: Path, store_in_root: Store
) -> None:
    """Resolving a run's paths reads symbolic links: in nodes and routers it runs in a worker
    thread (``langgraph dev`` refuses ``os.readlink`` on its event loop)."""
    from tests.blocking import langgraph_dev_blockbuster

    (root / "alias").symlink_to(store_in_root.root, target_is_directory=True)
    pairs = PairStore.open(root / "pairs.sqlite", embedder=HashingEmbedder())
    pairs.add("Who built the Eiffel Tower?", "Gustave Eiffel", "Gustave Eiffel built it.")
    pairs.close()
    (root / "fb-link.sqlite").symlink_to(root / "pairs.sqlite")
    policy = OperatorPolicy(store_root=root)
    runs = [
        ("standard_rag", {"store": "alias", "retrieval_mode": "bm25"}),
        ("rag_ef", {"store": "alias", "feedback_store": "fb-link.sqlite", "similarity": "bm25"}),
    ]

    async def go() -> list[dict[str, Any]]:
        with langgraph_dev_blockbuster():
            return [
                await build_graph(m, llm=model(), policy=policy).ainvoke({"question": Q}, context=c)
                for m, c in runs
            ]

    for out in asyncio.run(go()):
        assert out["answer"] == "Gustave Eiffel" and out["evidence"]


def test_store_file_linked_out_of_the_root_is_refused_unread(
    root: Path, store_in_root: Store, tmp_path: Path
) -> None:
    docs = store_in_root.version_dir / "docs.jsonl"
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(docs.read_bytes())
    docs.unlink()
    docs.symlink_to(outside)
    g = build_graph("standard_rag", llm=model(), policy=OperatorPolicy(store_root=root))
    with pytest.raises(InputError, match=r"outside the store root \(its v-\S+/docs.jsonl leads"):
        g.invoke({"question": Q}, context={"store": "store", "retrieval_mode": "bm25"})


@pytest.mark.parametrize("value", ["a\x00b", "a\nb", "x" * 2000])
def test_path_with_characters_no_path_has_is_an_input_error(
    value: str, root: Path, store_in_root: Store
) -> None:
    for policy in (
        OperatorPolicy(store_root=root),
        OperatorPolicy(dev_allow_runtime_settings=True),
    ):
        g = build_graph("standard_rag", llm=model(), policy=policy)
        with pytest.raises(InputError, match=r"^standard_rag: store=.{1,60} is not a path"):
            g.invoke({"question": Q}, context={"store": value})


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.mark.parametrize(
    ("method", "name", "context"),
    [
        ("rag_ef", "feedback_store", {}),
        ("missing_knowledge", "qa_store", {"kb_primary": "qa_pairs"}),
    ],
)
def test_runtime_pair_store_opens_only_an_existing_pair_store(
    method: str, name: str, context: dict[str, Any], root: Path, store_in_root: Store
) -> None:
    """Never created, never another store's database (Chroma's ``chroma.sqlite3`` keeps its
    bytes, tables and journal mode), writes or no writes."""
    policy = OperatorPolicy(store_root=root, feedback_writes=False)
    g = build_graph(method, llm=model(), retriever=store_in_root, policy=policy)
    chroma = store_in_root.version_dir / "chroma"
    before = _files(chroma)
    for value, error in (
        ("new/fb.sqlite", "there is no pair store"),
        ("store", "is a folder"),
        (str((chroma / "chroma.sqlite3").relative_to(root)), "is not a gaprag pair store"),
        (str(store_in_root.version_dir.relative_to(root) / "docs.jsonl"), "not a gaprag pair"),
    ):
        with pytest.raises(StoreError, match=error):
            g.invoke({"question": Q}, context={**context, name: value})
    assert not (root / "new").exists()
    assert _files(chroma) == before
    pairs = PairStore.open(root / "pairs.sqlite", embedder=HashingEmbedder())
    pairs.add("Who built the Eiffel Tower?", "Gustave Eiffel", "Gustave Eiffel built it.")
    pairs.close()
    out = g.invoke({"question": Q}, context={**context, name: "pairs.sqlite"})
    assert out["answer"] == "Gustave Eiffel"


def test_served_errors_and_schemas_show_no_server_path(
    root: Path, store_in_root: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_STORE_ROOT", str(root))
    monkeypatch.setenv("GAPRAG_STORE", str(store_in_root.root))
    monkeypatch.setenv("GAPRAG_FEEDBACK_STORE", str(root / "fb.sqlite"))
    policy = OperatorPolicy.from_env(served=True)
    g = build_graph("rag_ef", llm=model(), policy=policy)
    props = g.get_context_jsonschema()["properties"]
    assert props["store"]["default"] == props["feedback_store"]["default"] == HIDDEN_PATH
    assert str(root) not in json.dumps(props)
    out = g.invoke({"question": Q}, context={"store": HIDDEN_PATH, "similarity": "bm25"})
    assert out["answer"]  # the stand-in is the operator's value
    with pytest.raises(StoreError) as err:
        g.invoke({"question": Q}, context={"feedback_store": "missing.sqlite"})
    assert str(root) not in str(err.value) and "<store root>/missing.sqlite" in str(err.value)
    assert policy.hide("at /etc/x/y and /etc/passwd.") == "at <server path> and <server path>."
    assert policy.hide("POST /v1/chat/completions: 500") == "POST /v1/chat/completions: 500"


def test_store_under_the_root_is_allowed_by_relative_name(root: Path, store_in_root: Store) -> None:
    g = build_graph("standard_rag", llm=model(), policy=OperatorPolicy(store_root=root))
    out = g.invoke({"question": Q}, context={"store": "store", "retrieval_mode": "bm25"})
    assert out["answer"] == "Gustave Eiffel" and out["evidence"]


def test_feedback_store_outside_the_root_is_not_created(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "x" / "y" / "fb.sqlite"
    g = build_graph("rag_ef", llm=model(), policy=OperatorPolicy(store_root=root))
    with pytest.raises(InputError):
        g.invoke({"question": Q}, context={"feedback_store": str(target)})
    assert not (tmp_path / "x").exists()


def test_runtime_path_equal_to_the_operator_value_is_no_change(
    store_in_root: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_STORE", str(store_in_root.root))
    g = build_graph("standard_rag", llm=model())
    assert effective_settings(g.context_schema)["store"] == {
        "value": str(store_in_root.root), "source": "env GAPRAG_STORE"
    }  # fmt: skip
    out = g.invoke(
        {"question": Q}, context={"store": str(store_in_root.root), "retrieval_mode": "bm25"}
    )
    assert out["evidence"]
    with pytest.raises(InputError, match="store=''"):  # a run cannot unset it either
        g.invoke({"question": Q}, context={"store": ""})


# -- loaders ---------------------------------------------------------------------------------
class _Marker:
    """Unpickling this creates the file at ``path``: what a crafted pickle could do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def _crafted_store(root: Path, docs: list[dict[str, str]], marker: Path) -> Path:
    path = root / "crafted"
    built = Store.build(path, docs, embedder=HashingEmbedder(), progress=False,
                        bm25_engine="rank_bm25")  # fmt: skip
    bm25 = built.version_dir / "bm25"
    (bm25 / "rank_bm25.json").unlink()
    (bm25 / "rank_bm25.pkl").write_bytes(pickle.dumps(_Marker(marker)))
    return path


def test_store_with_a_pickled_index_is_refused_unread(
    root: Path, tmp_path: Path, tiny_docs: list[dict[str, str]]
) -> None:
    marker = tmp_path / "pwned"
    path = _crafted_store(root, tiny_docs, marker)
    with pytest.raises(StoreError, match="pickle") as err:
        Store.open(path)
    assert f"gaprag index CORPUS --bm25 rank_bm25 --store {path}" in err.value.hint
    g = build_graph("standard_rag", llm=model(), policy=OperatorPolicy(store_root=root))
    with pytest.raises(StoreError):
        g.invoke({"question": Q}, context={"store": "crafted", "retrieval_mode": "bm25"})
    assert not marker.exists()


def test_rank_bm25_index_reopens_from_json(root: Path, tiny_docs: list[dict[str, str]]) -> None:
    built = Store.build(root / "r", tiny_docs, embedder=HashingEmbedder(), progress=False,
                        bm25_engine="rank_bm25")  # fmt: skip
    files = {p.name for p in (built.version_dir / "bm25").iterdir()}
    assert "rank_bm25.json" in files and not any(f.endswith(".pkl") for f in files)
    again = Store.open(root / "r")
    assert again.bm25.search("Eiffel tower Paris", 2) == built.bm25.search("Eiffel tower Paris", 2)


def test_store_whose_current_points_outside_is_refused(root: Path, store_in_root: Store) -> None:
    (store_in_root.root / "CURRENT").write_text("../../elsewhere")
    with pytest.raises(StoreError, match="outside itself"):
        Store.open(store_in_root.root)


# -- spend -----------------------------------------------------------------------------------
def test_bound_above_the_operator_cap_is_refused(store_in_root: Store) -> None:
    policy = OperatorPolicy(max_bounds={"max_iterations": 2, "max_steps": 2})
    with pytest.raises(InputError, match="above the operator's cap of 2"):
        graph("iterkey", store_in_root, policy=policy).invoke(
            {"question": Q}, context={"max_iterations": 4}
        )
    with pytest.raises(InputError, match="max_steps=3"):
        graph("ircot", store_in_root, policy=policy).invoke(
            {"question": Q}, context={"max_steps": 3}
        )


def test_default_above_the_cap_is_lowered_to_it(
    store_in_root: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_MAX_BOUNDS", "max_iterations=2")
    out = graph("iterkey", store_in_root, llm=model("Paris")).invoke({"question": Q})  # default 5
    assert out["iterations"] == 2 and out["stop_reason"] == "max_iterations"


def test_runtime_calibration_is_refused(store_in_root: Store) -> None:
    with pytest.raises(InputError, match="calibration=True"):
        graph("iterkey", store_in_root).invoke({"question": Q}, context={"calibration": True})


def tokens(out: dict[str, Any]) -> int:
    return int(out["usage"]["prompt_tokens"]) + int(out["usage"]["completion_tokens"])


@pytest.mark.parametrize("method", LOOPING)
def test_token_budget_refuses_the_call_it_cannot_cover(method: str, store_in_root: Store) -> None:
    free_llm, llm = model("Paris"), model("Paris")
    free = graph(method, store_in_root, llm=free_llm).invoke({"question": Q})
    budget = tokens(free) // 2
    policy = OperatorPolicy(token_budget=budget)
    out = graph(method, store_in_root, llm=llm, policy=policy).invoke({"question": Q})
    assert out["stop_reason"] == "token_budget"
    assert tokens(out) <= budget
    assert out["usage"]["llm_calls"] == len(llm.calls) < len(free_llm.calls)


@pytest.mark.parametrize("method", LOOPING)
def test_deadline_sends_no_call_after_it(method: str, store_in_root: Store) -> None:
    llm = model("Paris")
    policy = OperatorPolicy(deadline_s=1e-9)
    out = graph(method, store_in_root, llm=llm, policy=policy).invoke({"question": Q})
    assert out["stop_reason"] == "deadline"
    assert llm.calls == [] and out["usage"]["llm_calls"] == 0
    assert out["answer"] == ""


def test_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPRAG_RUN_DEADLINE", "30")
    monkeypatch.setenv("GAPRAG_RUN_TOKEN_BUDGET", "5000")
    monkeypatch.setenv("GAPRAG_MAX_BOUNDS", "max_iterations=3, max_steps=5")
    policy = OperatorPolicy.from_env()
    assert (policy.deadline_s, policy.token_budget) == (30.0, 5000)
    assert dict(policy.max_bounds) == {"max_iterations": 3, "max_steps": 5}
    monkeypatch.setenv("GAPRAG_MAX_BOUNDS", "max_iterations")
    with pytest.raises(GapragError, match="GAPRAG_MAX_BOUNDS"):
        OperatorPolicy.from_env()


def test_a_served_graph_has_a_deadline_and_a_token_budget_unless_the_operator_sets_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gaprag.operator import SERVED_DEADLINE_S, SERVED_TOKEN_BUDGET

    served = OperatorPolicy.from_env(served=True)
    assert (served.deadline_s, served.token_budget) == (SERVED_DEADLINE_S, SERVED_TOKEN_BUDGET)
    assert (OperatorPolicy.from_env().deadline_s, OperatorPolicy.from_env().token_budget) == (
        None, None,
    )  # fmt: skip
    monkeypatch.setenv("GAPRAG_RUN_DEADLINE", "7200")
    monkeypatch.setenv("GAPRAG_RUN_TOKEN_BUDGET", "1000000")
    raised = OperatorPolicy.from_env(served=True)
    assert (raised.deadline_s, raised.token_budget) == (7200.0, 1_000_000)


def test_a_served_run_with_no_operator_settings_stops_at_the_default_budget(
    monkeypatch: pytest.MonkeyPatch, store_in_root: Store
) -> None:
    from gaprag import operator

    llm = model("Paris")
    free = graph("ircot", store_in_root, llm=model("Paris")).invoke({"question": Q})
    monkeypatch.setattr(operator, "SERVED_TOKEN_BUDGET", tokens(free) // 2)
    served = OperatorPolicy.from_env(served=True)
    out = graph("ircot", store_in_root, llm=llm, policy=served).invoke({"question": Q})
    assert out["stop_reason"] == "token_budget" and tokens(out) <= tokens(free) // 2


def test_settings_cache_is_bounded() -> None:
    deps = Deps()
    for i in range(3 * CACHE_SIZE):
        deps.cached(("store", i), object)
    assert len(deps._cache) == CACHE_SIZE
    assert ("store", 3 * CACHE_SIZE - 1) in deps._cache and ("store", 0) not in deps._cache


def test_served_rag_ef_stores_resumed_feedback_only_when_enabled(
    store_in_root: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert OperatorPolicy.from_env(served=True).feedback_writes is False
    monkeypatch.setenv("GAPRAG_FEEDBACK_WRITES", "1")
    assert OperatorPolicy.from_env(served=True).feedback_writes is True
    for writes, reason, count in ((False, "feedback_not_stored", 0), (True, "reanswered", 1)):
        pairs = PairStore.open(tmp_path / f"fb-{writes}.sqlite", embedder=HashingEmbedder())
        g = build_graph("rag_ef", llm=model(), pair_store=pairs, retriever=store_in_root,
                        checkpointer=InMemorySaver(), review=True,
                        policy=OperatorPolicy(feedback_writes=writes))  # fmt: skip
        cfg: Any = {"configurable": {"thread_id": f"t-{writes}"}}
        g.invoke({"question": Q}, cfg)
        out = g.invoke(Command(resume={"answer": "Eiffel", "chunk": "Eiffel built it."}), cfg)
        assert out["stop_reason"] == reason
        assert len(pairs) == count


@pytest.mark.parametrize(
    ("value", "expected"), [("", False), ("1", True), ("Yes", True), ("on", True), ("0", False),
                            ("OFF", False), ("no", False)],
)  # fmt: skip
def test_operator_switches_read_on_and_off_spellings(
    value: str, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPRAG_FEEDBACK_WRITES", value)
    monkeypatch.setenv("GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS", value)
    policy = OperatorPolicy.from_env(served=True)
    assert policy.feedback_writes is expected and policy.dev_allow_runtime_settings is expected


@pytest.mark.parametrize("name", ["GAPRAG_FEEDBACK_WRITES", "GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS"])
def test_a_misspelt_operator_switch_is_an_error_not_off(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, "enabled")
    with pytest.raises(GapragError, match=f"{name}='enabled' is neither on nor off"):
        OperatorPolicy.from_env(served=True)


# -- the developer's switch ------------------------------------------------------------------
def test_dev_switch_allows_runtime_settings(
    store_in_root: Store, recorder: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS", "1")
    g = build_graph("standard_rag")
    context = {
        "base_url": recorder.base_url,
        "store": str(store_in_root.root),
        "retrieval_mode": "bm25",
    }
    out = g.invoke({"question": Q}, context=context)
    assert out["answer"] == "Gustave Eiffel" and out["evidence"]
    assert all(SECRET not in h["authorization"] for h in recorder.headers)
    assert os.environ["GAPRAG_DEV_ALLOW_RUNTIME_SETTINGS"] == "1"


# -- the operator's own channels -------------------------------------------------------------
def test_build_time_and_env_settings_are_the_operators(
    store_in_root: Store, recorder: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--set store=...`, eval variants and `as_tool(...)` pass settings at build time; the
    environment's GAPRAG_<NAME> fills what they leave empty, and its endpoint gets the key."""
    from gaprag import as_tool

    tool = as_tool(
        "standard_rag", llm=model(), store=str(store_in_root.root), retrieval_mode="bm25"
    )
    assert "Gustave Eiffel" in tool.invoke({"question": Q})
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("GAPRAG_BASE_URL", recorder.base_url)
    with FakeOpenAI(reply="Eiffel tower builder") as keywords:
        monkeypatch.setenv("GAPRAG_KEYWORDS_BASE_URL", keywords.base_url)
        g = build_graph("iterkey", retriever=store_in_root, max_iterations=1)
        assert effective_settings(g.context_schema)["keywords_base_url"]["source"] == (
            "env GAPRAG_KEYWORDS_BASE_URL"
        )
        g.invoke({"question": Q})
        assert keywords.requests and recorder.requests  # keywords there, the rest here
        assert {h["authorization"] for h in keywords.headers} == {f"Bearer {SECRET}"}
