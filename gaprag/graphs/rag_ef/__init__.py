"""RAG-EF: answers from a store of (question, answer, chunk) pairs that experts can correct.

``build_graph("rag_ef", pair_store=...)``; the pieces: ``graph.py`` (wiring and routing),
``nodes.py``, ``state.py``, ``context.py``, ``prompts.toml``, ``blocks.py`` (the Q&A and
context blocks), ``feedback.py`` (stores, the expert's pause), ``synth.py`` (synthetic pairs), ``cli.py``
(``gaprag feedback``). The S/E/O evaluation ladder is in the repository's lab (``lab/ladder.py``).
"""

from gaprag.graphs.rag_ef.context import Context
from gaprag.graphs.rag_ef.graph import build
from gaprag.graphs.rag_ef.state import OutputState, State

__all__ = ["Context", "OutputState", "State", "build"]
