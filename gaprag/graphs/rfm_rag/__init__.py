"""RFM-RAG: retrieval feedback (a tiny trained sufficiency MLP) and a persistent evidence pool."""
