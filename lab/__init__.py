"""gaprag's research lab: what measures and tunes gaprag's methods but no user of the library
needs, kept in the repository and out of the wheel. It uses gaprag's public modules; gaprag
never imports it.

- :mod:`lab.replay`: offline replays of ``gaprag eval`` run directories (answer choice,
  rereading, escalation settings), ``python -m lab replay``;
- :mod:`lab.ladder`: RAG-EF's evaluation ladder (the stores S, S ∪ E and Eq. 1 beside plain RAG);
- :mod:`lab.rfm`: training, auditing and re-scoring RFM-RAG's R-Feedback model,
  ``python -m lab rfm``.

Run from the repository's root with its environment: ``python -m lab --help``.
"""
