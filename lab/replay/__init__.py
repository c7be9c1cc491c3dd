"""The offline replays over ``gaprag eval`` run directories (``python -m lab replay``): what a rule
would have given on answers a run already has, without running the methods again.

- :mod:`~lab.replay.rundir`: reading rows, run records and datasets of a run
  directory, and the resumable record files written beside them;
- :mod:`~lab.replay.candidates`: one candidate type and one pair per gated row;
- :mod:`~lab.replay.scoring`: a recorded final answer scored from its trace;
- :mod:`~lab.replay.selection`, :mod:`~lab.replay.reread`,
  :mod:`~lab.replay.escalation`: the replays, each applying the graph's own rules
  (:mod:`gaprag.nodes.choice`) where it replays a graph;
- :mod:`~lab.replay.tables`: paired intervals and number formats;
- :mod:`~gaprag.profiles.writer`: the one model-profile writer;
- :mod:`~lab.replay.cli`: the ``python -m lab replay`` command.
"""
