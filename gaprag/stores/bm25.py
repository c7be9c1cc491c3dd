"""Sparse retrieval: BM25 over the same document ids as the dense store.

Tokenisation is bm25s's own (``bm25s.tokenize``): lower-case, its word splitter, its stop-word
list for the configured language and the Snowball stemmer from PyStemmer. One addition: CJK
ideographs are split into single characters (Chinese has no spaces between words), so a
Chinese corpus still matches without a word segmenter.

Engines: ``bm25s`` (default; precomputed sparse score matrix, top-k with its numba backend
when numba is installed) and ``rank_bm25`` (the reference implementation the design card
names; scores every document per query). Both use the same tokens and the same ``k1``/``b``.

Both are saved in formats that loading cannot execute: bm25s's own (JSON and numpy arrays,
read without pickle) and, for ``rank_bm25``, its scoring state as JSON (``rank_bm25.json``).
A store with an older ``rank_bm25.pkl`` is refused with the command that rebuilds it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, get_args, overload

import numpy as np
import numpy.typing as npt

from gaprag.errors import StoreError

Engine = Literal["bm25s", "rank_bm25"]
ENGINES: tuple[Engine, ...] = get_args(Engine)
Method = Literal["lucene", "robertson", "atire", "bm25l", "bm25+"]
METHODS: tuple[Method, ...] = get_args(Method)

RANK_BM25_FILE = "rank_bm25.json"
# rank_bm25's scoring state: every attribute its get_scores reads, by class
_RANK_BM25_STATE = ("corpus_size", "avgdl", "doc_freqs", "idf", "doc_len", "k1", "b")
_RANK_BM25_EXTRA = {"BM25Okapi": ("epsilon", "average_idf"), "BM25L": ("delta",),
                    "BM25Plus": ("delta",)}  # fmt: skip

# bm25s's default splitter (words of two or more characters), plus single CJK ideographs
TOKEN_PATTERN = r"(?u)[\u4e00-\u9fff]|[^\W\u4e00-\u9fff]{2,}"

# language -> bm25s stop-word list name; the stemmer is PyStemmer's algorithm of the same name
_STOPWORD_LANGUAGES = frozenset(
    ("english", "german", "dutch", "french", "spanish", "portuguese", "italian", "russian",
     "swedish", "norwegian", "chinese", "turkish", "korean", "danish")
)  # fmt: skip
_ALIASES = {
    "en": "english", "de": "german", "nl": "dutch", "fr": "french", "es": "spanish",
    "pt": "portuguese", "it": "italian", "ru": "russian", "sv": "swedish", "no": "norwegian",
    "zh": "chinese", "tr": "turkish", "ko": "korean", "da": "danish",
}  # fmt: skip


def _stemmer_languages() -> frozenset[str]:
    try:
        import Stemmer
    except ImportError:
        return frozenset()
    return frozenset(Stemmer.algorithms())


def languages() -> list[str]:
    """Every accepted ``language`` value (``none`` = no stop words, no stemming)."""
    return sorted(_STOPWORD_LANGUAGES | _stemmer_languages() | {"none"})


@dataclass(frozen=True)
class BM25Settings:
    """How the BM25 index tokenises and scores; stored with the index and reused for queries.

    ``language`` picks the stop-word list (bm25s) and the Snowball stemmer (PyStemmer);
    ``stemmer=False`` keeps stop words but not stemming; ``language="none"`` disables both.
    ``method`` is the BM25 variant of bm25s (Lucene's by default); ``rank_bm25`` implements
    ``bm25l`` and ``bm25+`` and treats the other three as Okapi BM25.
    """

    engine: Engine = "bm25s"
    language: str = "english"
    stemmer: bool = True
    k1: float = 1.5
    b: float = 0.75
    method: Method = "lucene"

    def __post_init__(self) -> None:
        lang = _ALIASES.get(self.language.lower(), self.language.lower())
        object.__setattr__(self, "language", lang)
        if self.engine not in ENGINES:
            raise StoreError(
                f"unknown BM25 engine {self.engine!r}", hint=f"use one of {', '.join(ENGINES)}"
            )
        if self.method not in METHODS:
            raise StoreError(
                f"unknown BM25 method {self.method!r}", hint=f"use one of {', '.join(METHODS)}"
            )
        if lang not in languages():
            raise StoreError(
                f"unknown BM25 language {self.language!r}",
                hint=f"use one of {', '.join(languages())} (needs PyStemmer for stemming)",
            )
        if not (self.k1 >= 0 and 0 <= self.b <= 1):
            raise StoreError(
                f"BM25 k1={self.k1}, b={self.b} out of range", hint="use k1 >= 0 and 0 <= b <= 1"
            )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BM25Settings:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    @property
    def stopwords(self) -> str | None:
        return self.language if self.language in _STOPWORD_LANGUAGES else None

    @property
    def stemmer_language(self) -> str | None:
        if self.stemmer and self.language in _stemmer_languages():
            return self.language
        return None


@lru_cache(maxsize=16)
def _stemmer(language: str | None) -> Any:
    if language is None:
        return None
    import Stemmer

    return Stemmer.Stemmer(language)


#: texts tokenised at a time by :func:`tokenize_many` (a stream is never held whole)
TOKENIZE_CHUNK = 2048


class TokenIds(Sequence[memoryview]):
    """The token ids of many texts in one ``array("i")`` (4 bytes a token) with each text's
    end; each text's ids are a ``memoryview`` of it, which bm25s reads as it reads a list."""

    def __init__(self) -> None:
        self.tokens: array[int] = array("i")
        self.ends: array[int] = array("q")

    def extend(self, docs: Iterable[Iterable[int]]) -> None:
        for doc in docs:
            self.tokens.extend(doc)
            self.ends.append(len(self.tokens))

    def __len__(self) -> int:
        return len(self.ends)

    @overload
    def __getitem__(self, index: int) -> memoryview: ...
    @overload
    def __getitem__(self, index: slice) -> list[memoryview]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = range(len(self))[index]
        start = self.ends[index - 1] if index else 0
        return memoryview(self.tokens)[start : self.ends[index]]


def tokenize_many(texts: Iterable[str], settings: BM25Settings | None = None) -> Any:
    """``bm25s.Tokenized`` (ids + vocabulary) for ``texts``, ready for ``bm25s.BM25.index``.

    ``texts`` may be a stream: bm25s's ``Tokenizer`` reads it :data:`TOKENIZE_CHUNK` texts at
    a time into one shared vocabulary, and only the token ids are kept (:class:`TokenIds`).
    The terms are those of ``bm25s.tokenize`` (lower case, :data:`TOKEN_PATTERN`, stop words
    dropped before stemming; a text with no terms has none, no empty token)."""
    import bm25s

    s = settings or BM25Settings()
    tokenizer = bm25s.tokenization.Tokenizer(
        lower=True,
        splitter=TOKEN_PATTERN,
        stopwords=s.stopwords,  # None: no stop words
        stemmer=_stemmer(s.stemmer_language),
    )
    ids = TokenIds()
    stream = iter(texts)
    while chunk := list(itertools.islice(stream, TOKENIZE_CHUNK)):
        ids.extend(
            tokenizer.tokenize(chunk, update_vocab=True, show_progress=False, allow_empty=False)
        )
    return tokenizer.to_tokenized_tuple(ids)


def tokenize(text: str, settings: BM25Settings | None = None) -> list[str]:
    """The index terms of ``text`` (stemmed, stop words removed) as strings."""
    import bm25s

    s = settings or BM25Settings()
    out: list[list[str]] = bm25s.tokenize(
        text,
        token_pattern=TOKEN_PATTERN,
        stopwords=s.stopwords,
        stemmer=_stemmer(s.stemmer_language),
        return_ids=False,
        show_progress=False,
    )
    return out[0]


def _top_positive(scores: npt.NDArray[Any], k: int) -> list[tuple[int, float]]:
    """The ``k`` best (row, score) pairs with a positive score, best first.

    Selects among the non-zero scores only: numpy's argpartition is very slow on arrays that
    are mostly equal (zeros), which is what a BM25 score vector over a large corpus is.
    """
    rows = np.flatnonzero(scores > 0)
    if rows.size > k:
        part = np.argpartition(-scores[rows], k - 1)[:k]
        rows = rows[part]
    order = np.argsort(-scores[rows], kind="stable")
    rows = rows[order]
    return [(int(r), float(scores[r])) for r in rows]


_numba_lock = threading.Lock()
_numba_ready: bool | None = None


def _numba_available() -> bool:
    """True when bm25s's numba backend can be used; turns on numba's on-disk cache for it.

    bm25s compiles its numba functions without ``cache=True``, which costs ~20 s per process
    on a 2-core machine. Enabling numba's cache (its usual places: ``__pycache__`` beside the
    source, else the user cache; ``NUMBA_CACHE_DIR`` overrides) makes later processes load
    them in ~1 s.
    """
    global _numba_ready
    with _numba_lock:
        if _numba_ready is None:
            try:
                from bm25s.numba import retrieve_utils, selection

                for module in (retrieve_utils, selection):
                    for name in dir(module):
                        fn = getattr(module, name)
                        if hasattr(fn, "enable_caching") and hasattr(fn, "py_func"):
                            with contextlib.suppress(Exception):
                                fn.enable_caching()
                _numba_ready = True
            except Exception:  # numba missing or incompatible: numpy scoring works everywhere
                _numba_ready = False
        return _numba_ready


#: whether a store opens its bm25s score arrays memory-mapped (``Store.open(bm25_mmap=)``)
MMAP = True


def checked_mmap(mmap: object) -> bool:
    """``mmap`` if it is a bool, else a :class:`StoreError` naming the setting."""
    if not isinstance(mmap, bool):
        raise StoreError(
            f"bm25_mmap must be True or False, not {mmap!r}",
            hint="True memory-maps the BM25 score arrays, False reads them into memory",
        )
    return mmap


class BM25Index:
    def __init__(
        self, settings: BM25Settings, model: Any, size: int, *, mmap: bool = False
    ) -> None:
        self.settings = settings
        self._model = model
        self.size = size
        #: whether bm25s's score arrays are memory-mapped from the index's files
        self.mmap = mmap

    @property
    def engine(self) -> Engine:
        return self.settings.engine

    @classmethod
    def build(
        cls, texts: Iterable[str], settings: BM25Settings | Engine | None = None
    ) -> BM25Index:
        s = BM25Settings(engine=settings) if isinstance(settings, str) else settings
        s = s or BM25Settings()
        tokens = tokenize_many(texts, s)
        if tokens.ids and not tokens.vocab:
            raise StoreError(
                "the corpus has no searchable words for BM25 (every word is a stop word or "
                "too short)",
                hint="index real text, or build with BM25Settings(language='none') to keep "
                "stop words",
            )
        if s.engine == "bm25s":
            import bm25s

            model: Any = bm25s.BM25(
                k1=s.k1,
                b=s.b,
                method=s.method,
                backend="numba" if _numba_available() else "numpy",
                auto_compile=False,  # the numba CSC builder would compile for seconds per process
            )
            model.index(tokens, show_progress=False)
        else:
            from rank_bm25 import BM25L, BM25Okapi, BM25Plus

            vocab = {i: w for w, i in tokens.vocab.items()}
            corpus = [[vocab[i] for i in doc] or [""] for doc in tokens.ids]
            kind = {"bm25l": BM25L, "bm25+": BM25Plus}.get(s.method, BM25Okapi)
            model = kind(corpus, k1=s.k1, b=s.b)
        return cls(s, model, len(tokens.ids))

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        if self.engine == "bm25s":
            self._model.save(str(directory), show_progress=False)
        else:
            (directory / RANK_BM25_FILE).write_text(json.dumps(_rank_bm25_state(self._model)))
        (directory / "settings.json").write_text(json.dumps(self.settings.as_dict()))

    @classmethod
    def load(cls, directory: Path, size: int, *, mmap: bool = MMAP) -> BM25Index:
        """The index saved in ``directory``; ``mmap`` memory-maps bm25s's score arrays
        (``bm25s.BM25.load(mmap=True)``: read-only ``numpy.memmap`` arrays, paged in from the
        file as queries read them) instead of reading them into memory. The vocabulary and
        parameters are read either way; ``rank_bm25``'s JSON state is always read whole."""
        checked_mmap(mmap)
        try:
            settings = BM25Settings.from_dict(json.loads((directory / "settings.json").read_text()))
        except (OSError, ValueError) as exc:
            raise StoreError(
                f"the BM25 index in {directory} is unreadable ({exc})",
                hint="rebuild the store with `gaprag index`",
            ) from None
        if settings.engine == "bm25s":
            import bm25s

            model: Any = bm25s.BM25.load(str(directory), mmap=mmap, show_progress=False)
            model.backend = "numba" if _numba_available() else "numpy"
        else:
            model = _load_rank_bm25(directory)
        return cls(settings, model, size, mmap=mmap and settings.engine == "bm25s")

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """(row, score) pairs, best first, only rows with a positive score."""
        if self.size == 0 or k <= 0:
            return []
        tokens = tokenize(query, self.settings)
        if not tokens:
            return []
        k = min(k, self.size)
        if self.engine == "rank_bm25":
            return _top_positive(np.asarray(self._model.get_scores(tokens)), k)
        ids = self._model.get_tokens_ids(tokens)
        if not ids:
            return []
        if self._model.backend == "numba":
            rows, scores = self._model.retrieve([ids], k=k, show_progress=False, n_threads=1)
            pairs = zip(rows[0].tolist(), scores[0].tolist(), strict=True)
            return [(int(r), float(s)) for r, s in pairs if s > 0]
        return _top_positive(self._model.get_scores(ids), k)


def _rank_bm25_state(model: Any) -> dict[str, Any]:
    """A rank_bm25 engine's scoring state as JSON-ready data."""
    kind = type(model).__name__
    names = _RANK_BM25_STATE + _RANK_BM25_EXTRA.get(kind, ())
    return {"class": kind, **{name: getattr(model, name) for name in names}}


def _load_rank_bm25(directory: Path) -> Any:
    """The rank_bm25 engine saved as JSON in ``directory``; a legacy pickle is refused unread."""
    import rank_bm25

    path = directory / RANK_BM25_FILE
    store = directory.parent.parent
    if not path.is_file() and (directory / "rank_bm25.pkl").exists():
        raise StoreError(
            f"the store at {store} keeps its rank_bm25 index as a pickle, which gaprag does "
            "not load (unpickling can run code)",
            hint=f"rebuild it: gaprag index CORPUS --bm25 rank_bm25 --store {store}",
        )
    try:
        data = json.loads(path.read_text())
        kind = data["class"]
        if kind not in _RANK_BM25_EXTRA:
            raise ValueError(f"unknown engine class {kind!r}")
        model = getattr(rank_bm25, kind).__new__(getattr(rank_bm25, kind))
        for name in _RANK_BM25_STATE + _RANK_BM25_EXTRA[kind]:
            setattr(model, name, data[name])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreError(
            f"the rank_bm25 index in {directory} is unreadable ({exc})",
            hint=f"rebuild it: gaprag index CORPUS --bm25 rank_bm25 --store {store}",
        ) from None
    model.tokenizer = None
    return model
