"""The shared node library: the steps that are the same kind of step in several methods.

- :mod:`~gaprag.nodes.retrieve`: run queries against the retriever (every mode, excluding
  seen ids); the retriever records every id it returns.
- :mod:`~gaprag.nodes.render`: the one passage renderer (format from the prompt file),
  recording what is shown to the model.
- :mod:`~gaprag.nodes.answer`: generate an answer over passages and clean it.
- :mod:`~gaprag.nodes.short_answer`: reduce the final answer to its shortest span (the last
  step of every method, off with ``short_answer=false`` or ``reader="paper"``); its
  :func:`~gaprag.nodes.short_answer.add_short_answer` declares a graph's tail (reader, answer
  choice, short answer).
- :mod:`~gaprag.nodes.reader`: the shared reader (``reader="ranked"``): rank what a method
  gathered, keep a budget with the strongest next to the question, answer.
- :mod:`~gaprag.nodes.gate`: the shared gate (``gate``): answer as plain RAG does first and
  run the loop only when that answer is unsure.
- :mod:`~gaprag.nodes.select`: the shared answer scoring (``answer_scoring``) and choice
  (``answer_choice``): choose between plain RAG's answer and the loop's where the gate let
  the loop run.
- :mod:`~gaprag.nodes.pool`: update an evidence pool (dedup, provenance, round).
- :mod:`~gaprag.nodes.decisions`: record a loop decision with its probability and path.
- :mod:`~gaprag.nodes.wiring`: turn module-level node functions into graph nodes and routers,
  reset per-question state, validate the question; compile a method with a recursion limit
  that fits every valid run.
"""

from gaprag.nodes.answer import clean_answer, generate_answer
from gaprag.nodes.decisions import (
    Reading,
    log_decision,
    option_probability,
    read_choice,
    should_stop,
)
from gaprag.nodes.pool import update_evidence_pool
from gaprag.nodes.reader import Gathered, reader_answers
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
from gaprag.nodes.wiring import add_nodes, add_router, compile_graph

__all__ = [
    "Gathered",
    "PassageFormat",
    "Reading",
    "add_nodes",
    "add_router",
    "add_short_answer",
    "clean_answer",
    "compile_graph",
    "cut_text",
    "generate_answer",
    "join_passages",
    "load_formats",
    "log_decision",
    "option_probability",
    "read_choice",
    "reader_answers",
    "render_passages",
    "retrieve",
    "shorten",
    "should_stop",
    "truncate_words",
    "update_evidence_pool",
]
