"""RFM-RAG's R-Feedback model in the lab: its labelled examples (:mod:`.examples`), fitting
(:mod:`.train`), the audit of its probabilities on the pools the graph built
(:mod:`.pool_audit`) and re-scoring recorded decisions with other weights (:mod:`.rescore`);
``python -m lab rfm train|audit|calibrate`` (:mod:`.cli`). The features and the network the
graph loads stay in :mod:`gaprag.graphs.rfm_rag.feedback_model`."""
