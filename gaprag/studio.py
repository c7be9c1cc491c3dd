"""The graphs ``langgraph dev`` and LangGraph Studio serve (``langgraph.json`` points here).

Importing the module builds every registered method's graph (:func:`gaprag.graphs.list_methods`)
with :func:`gaprag.build_graph`, and each method's paper configuration as ``<method>_paper``
(``profile="paper"``): no injected model or retriever, and **no checkpointer** (the
server brings its own persistence and refuses graphs that carry one). :data:`GRAPHS` maps each
method name to its graph, and each graph is also a module global of that name
(``gaprag.studio.migres``), since the server looks graphs up in the module's ``__dict__``. A
method whose graph fails to build makes the import fail.

Building contacts no model and opens no store: a run resolves them on first use
(:mod:`gaprag.deps`), from the server's environment (the operator's):

- LLM: ``GAPRAG_BASE_URL`` (or ``OPENAI_BASE_URL``) with ``GAPRAG_MODEL``, else the embedded
  local server of ``GAPRAG_LOCAL_MODEL`` (started on the first call, not at import).
- Retriever: ``GAPRAG_STORE`` (a directory made by ``gaprag index``), else the bundled demo
  corpus (built into ``GAPRAG_HOME`` on first use).

Each graph carries the operator policy read from the environment at import
(:meth:`gaprag.operator.OperatorPolicy.from_env` with ``served=True``): a run sets only run
settings; endpoints, models, paths and the calibration switch stay the operator's unless the
environment allows a change, and RAG-EF's resumed reviews write to the feedback store only with
``GAPRAG_FEEDBACK_WRITES=1``.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph.state import CompiledStateGraph

from gaprag.config import manage_torch_threads
from gaprag.errors import GapragError
from gaprag.graphs import METHODS, build_graph, list_methods
from gaprag.operator import OperatorPolicy
from gaprag.profiles import load_profile

Graph = CompiledStateGraph[Any, Any, Any, Any]

manage_torch_threads()  # the server's process is gaprag's: see gaprag.config.torch_threads

#: The methods with a paper configuration (:file:`gaprag/profiles/paper.toml`), each also
#: served in it as ``<method>_paper``.
PAPER_METHODS: tuple[str, ...] = tuple(m for m in METHODS if load_profile("paper").settings(m))

#: Every served graph: each registered method in the registry's order, then each paper
#: configuration (``langgraph.json`` lists them alike).
GRAPH_NAMES: tuple[str, ...] = (*METHODS, *(f"{m}_paper" for m in PAPER_METHODS))


def server_graph(method: str, profile: str = "auto", name: str = "") -> Graph:
    """``method``'s graph as the server needs it: defaults (under ``profile``) only, no
    checkpointer, no store; named ``name`` (default: the method), which is also the name of
    the assistant the server makes for it and of its MCP tool."""
    graph = build_graph(method, profile=profile, policy=OperatorPolicy.from_env(served=True))
    if graph.checkpointer is not None:  # pragma: no cover - build_graph guarantees this
        raise GapragError(f"{method}: a served graph must not carry a checkpointer")
    return graph.copy(update={"name": name}) if name and name != graph.name else graph


#: Every served graph, by its name in ``langgraph.json``.
GRAPHS: dict[str, Graph] = {
    **{name: server_graph(name) for name in list_methods()},
    **{f"{m}_paper": server_graph(m, "paper", f"{m}_paper") for m in PAPER_METHODS},
}
globals().update(GRAPHS)
