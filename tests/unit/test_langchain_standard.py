"""LangChain's own standard tests (``langchain-tests``) for what gaprag hands to LangChain users.

- ``GapragRetriever`` (a gaprag store as a LangChain retriever): ``RetrieversIntegrationTests``
  on a real store of five documents (``HashingEmbedder``, no model load).
- The tools made by :func:`gaprag.as_tool`, one per method: ``ToolsUnitTests`` and
  ``ToolsIntegrationTests``, run with a scripted chat model over the same store.
- ``ScriptedChatModel`` (``gaprag.testing``): ``ChatModelUnitTests``.

The suites' ``has_*``/``supports_*`` properties say what does not apply (see
docs/reliability.md, "LangChain standard tests").
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import BaseTool

import gaprag
from gaprag import as_tool
from gaprag.stores import GapragRetriever, HashingEmbedder, Store
from gaprag.stores.documents import Document
from gaprag.testing import ScriptedChatModel

pytest.importorskip("langchain_tests", reason="needs the dev extra: langchain-tests")

from langchain_tests.integration_tests import (
    RetrieversIntegrationTests,
    ToolsIntegrationTests,
)
from langchain_tests.unit_tests import ChatModelUnitTests, ToolsUnitTests

QUESTION = "Who built the Eiffel Tower in Paris?"


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A store of five documents, shared by the module (no test writes to it)."""
    docs: list[Document] = [
        {"id": "eiffel", "title": "Eiffel Tower", "text": "The Eiffel Tower in Paris was built by Gustave Eiffel."},
        {"id": "fr", "title": "France", "text": "Paris is the capital and largest city of France."},
        {"id": "de", "title": "Germany", "text": "Berlin is the capital of Germany."},
        {"id": "hamlet", "title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."},
        {"id": "shakes", "title": "William Shakespeare", "text": "Shakespeare was born in Stratford."},
    ]  # fmt: skip
    root = tmp_path_factory.mktemp("standard") / "store"
    return Store.build(root, docs, embedder=HashingEmbedder(), progress=False)


# -- the retriever -------------------------------------------------------------------------
class TestGapragRetrieverStandard(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _store(self, module_store: Store) -> None:
        self.store = module_store

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return GapragRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"store": self.store}

    @property
    def retriever_query_example(self) -> str:
        return QUESTION


def test_retriever_call_overrides_k_and_mode(module_store: Store) -> None:
    retriever = GapragRetriever(store=module_store, k=5, mode="dense")
    docs = retriever.invoke("capital of Germany", k=1, mode="bm25")
    assert [d.metadata["id"] for d in docs] == ["de"]
    assert len(retriever.invoke("capital of Germany")) == 5  # the defaults are unchanged


async def test_retriever_async_call_overrides_k_and_mode(module_store: Store) -> None:
    retriever = GapragRetriever(store=module_store, k=5, mode="dense")
    docs = await retriever.ainvoke("capital of Germany", k=1, mode="bm25")
    assert [d.metadata["id"] for d in docs] == ["de"]


# -- the tools made by as_tool, one per method -------------------------------------------------
@pytest.fixture(params=gaprag.list_methods())
def method_tool(request: pytest.FixtureRequest, module_store: Store) -> BaseTool:
    """``as_tool(method)`` over the tiny store, with a model that always says the same."""
    model = ScriptedChatModel(default="Gustave Eiffel")
    return as_tool(request.param, llm=model, retriever=module_store)


class _MethodTool:
    @pytest.fixture(autouse=True)
    def _tool(self, method_tool: BaseTool) -> None:
        self.built = method_tool

    @property
    def tool_constructor(self) -> BaseTool:
        return self.built

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"question": QUESTION}


class TestAsToolUnitStandard(_MethodTool, ToolsUnitTests):
    pass


class TestAsToolIntegrationStandard(_MethodTool, ToolsIntegrationTests):
    pass


# -- the scripted chat model -----------------------------------------------------------------
class TestScriptedChatModelStandard(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[ScriptedChatModel]:
        return ScriptedChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"default": "Paris"}
