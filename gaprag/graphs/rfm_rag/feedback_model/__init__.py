"""The R-Feedback Model of rfm_rag: its features (:mod:`.features`, also computed by the graph),
the network and the sufficiency judges the graph loads (:mod:`.model`, with the shipped
``weights.json`` and its ``metrics.json``). Training it (``python -m lab rfm train``) is the
repository's research lab, not this package."""
