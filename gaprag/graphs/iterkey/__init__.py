"""IterKey: iterative keyword generation with LLMs for BM25 retrieval-augmented generation."""
