"""IRCoT: interleaving retrieval with chain-of-thought reasoning (Trivedi et al., arXiv 2212.10509)."""
