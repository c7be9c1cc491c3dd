"""The offline replays over ``gaprag eval`` run directories (``gaprag replay``): what a rule
would have given on answers a run already has, without running the methods again.

- :mod:`~gaprag.eval.offline.rundir`: reading rows, run records and datasets of a run
  directory, and the resumable record files written beside them;
- :mod:`~gaprag.eval.offline.candidates`: one candidate type and one pair per gated row;
- :mod:`~gaprag.eval.offline.scoring`: a recorded final answer scored from its trace;
- :mod:`~gaprag.eval.offline.selection`, :mod:`~gaprag.eval.offline.reread`,
  :mod:`~gaprag.eval.offline.escalation`: the replays, each applying the graph's own rules
  (:mod:`gaprag.nodes.choice`) where it replays a graph;
- :mod:`~gaprag.eval.offline.tables`: paired intervals and number formats;
- :mod:`~gaprag.eval.offline.profile`: the one model-profile writer;
- :mod:`~gaprag.eval.offline.cli`: the ``gaprag replay`` command.
"""
