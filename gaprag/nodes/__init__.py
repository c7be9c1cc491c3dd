"""The shared node library: the steps that are the same kind of step in several methods.

- :mod:`~gaprag.nodes.retrieve`: run queries against the retriever (every mode, excluding
  seen ids); the retriever records every id it returns.
- :mod:`~gaprag.nodes.render`: the one passage renderer (format from the prompt file),
  recording what is shown to the model.
- :mod:`~gaprag.nodes.answer`: generate an answer over passages and clean it.
- :mod:`~gaprag.nodes.short_answer`: reduce the final answer to its shortest span (the last
  step of every method, off with ``answer_style="paper"``).
- :mod:`~gaprag.nodes.pool`: update an evidence pool (dedup, provenance, round).
- :mod:`~gaprag.nodes.decisions`: record a loop decision with its probability and path.
- :mod:`~gaprag.nodes.wiring`: turn module-level node functions into graph nodes and routers,
  reset per-question state, validate the question.
"""

from gaprag.nodes.answer import clean_answer, generate_answer
from gaprag.nodes.decisions import log_decision, option_probability, should_stop
from gaprag.nodes.pool import update_evidence_pool
from gaprag.nodes.render import (
    PassageFormat,
    cut_text,
    join_passages,
    load_formats,
    render_passages,
    truncate_words,
)
from gaprag.nodes.retrieve import retrieve
from gaprag.nodes.short_answer import add_short_answer, shorten
from gaprag.nodes.wiring import add_nodes, add_router

__all__ = [
    "PassageFormat",
    "add_nodes",
    "add_router",
    "add_short_answer",
    "clean_answer",
    "cut_text",
    "generate_answer",
    "join_passages",
    "load_formats",
    "log_decision",
    "option_probability",
    "render_passages",
    "retrieve",
    "shorten",
    "should_stop",
    "truncate_words",
    "update_evidence_pool",
]
