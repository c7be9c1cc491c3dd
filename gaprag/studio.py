"""The graphs ``langgraph dev`` and LangGraph Studio serve (``langgraph.json`` points here).

Every method is exposed as a module attribute of the same name (``gaprag.studio.migres``),
compiled with :func:`gaprag.build_graph` and **no checkpointer**: the server brings its own
persistence and refuses graphs that carry one. Building is instant because the LLM and the
retriever are resolved on first use, from the server's environment (the operator's):

- LLM: ``GAPRAG_BASE_URL``/``GAPRAG_MODEL``, else the embedded local server (started on the
  first call, not at import).
- Retriever: ``GAPRAG_STORE`` (a directory made by ``gaprag index``), else the bundled demo
  corpus (built into ``GAPRAG_HOME`` on first use).

Whoever can start a run sets only run settings; endpoints, models, paths and the calibration
switch stay the operator's unless the environment allows a change
(:class:`gaprag.operator.OperatorPolicy`, read here once with ``served=True``: RAG-EF's resumed
reviews write to the feedback store only with ``GAPRAG_FEEDBACK_WRITES=1``).

The langgraph server looks attributes up in the module's ``__dict__``, so the graphs are real
module globals. A method whose module does not import yet is left out of the globals; asking
for it raises a :class:`~gaprag.errors.GapragError` that says so.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph.state import CompiledStateGraph

from gaprag.errors import GapragError
from gaprag.graphs import METHODS, build_graph, list_methods
from gaprag.operator import OperatorPolicy

Graph = CompiledStateGraph[Any, Any, Any, Any]

#: Every method the project defines, in ``langgraph.json`` order.
GRAPH_NAMES: tuple[str, ...] = tuple(METHODS)


def server_graph(method: str) -> Graph:
    """``method``'s graph as the server needs it: defaults only, no checkpointer, no store."""
    graph = build_graph(method, policy=OperatorPolicy.from_env(served=True))
    if graph.checkpointer is not None:  # pragma: no cover - build_graph guarantees this
        raise GapragError(f"{method}: a served graph must not carry a checkpointer")
    return graph


#: Every method's served graph, by method name.
GRAPHS: dict[str, Graph] = {name: server_graph(name) for name in list_methods()}
globals().update(GRAPHS)


def __getattr__(name: str) -> Graph:
    """Only reached for names not in the globals."""
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *GRAPHS})
