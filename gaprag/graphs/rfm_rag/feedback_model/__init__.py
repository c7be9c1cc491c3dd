"""The R-Feedback Model of rfm_rag: its features (:mod:`.features`, also computed by the graph),
the network and the sufficiency judges the graph loads (:mod:`.model`, with the shipped
``weights.json`` and its ``metrics.json``), the labelled examples (:mod:`.examples`), fitting
(:mod:`.train`, ``gaprag rfm train``) and re-scoring recorded decisions (:mod:`.rescore`)."""
