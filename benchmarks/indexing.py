"""Indexing benchmark: a cold store build, adding passages to it, and changing some of them.

For a store of ``--size`` passages (default 10,000: the bundled datasets' paragraphs, padded
with a distinguishing suffix as in ``retrieval.py``), it times:

* ``cold``: ``Store.build`` of all of them;
* ``add``: ``Store.add`` of ``--add`` new passages (default 1,000);
* ``change``: ``Store.index`` of the store's passages with ``--change`` of them edited
  (default 100; incremental clean-up, as ``gaprag index`` runs it).

Each step's time is the store's own work (BM25, copying and editing the Chroma collection,
writing the version), measured with a synthetic embedder that returns the shipped MiniLM
vectors of the demo corpus plus noise, so it excludes embedding. The MiniLM embedding time is
measured on ``--embed-sample`` passages and added per passage embedded (``with_minilm_s``);
every step counts the passages it embedded.

    python benchmarks/indexing.py [--size 10000] [--add 1000] [--change 100]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gaprag.stores.documents import Document
from gaprag.stores.embeddings import MiniLMEmbedder, Vectors
from gaprag.stores.store import Store

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "gaprag" / "data" / "eval"
DEMO_VECTORS = ROOT / "gaprag" / "data" / "demo" / "minilm_vectors.npz"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class SyntheticEmbedder:
    """Unit vectors of MiniLM's shape without running a model: a shipped demo vector chosen by
    the text's hash, plus noise seeded by it (the same text always gets the same vector)."""

    name = "synthetic-minilm"
    dim = 384

    def __init__(self) -> None:
        self.real = np.load(DEMO_VECTORS, allow_pickle=False)["vectors"].astype(np.float32)
        self.texts = 0

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> Vectors:
        self.texts += len(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha1(text.encode()).digest()[:8], "little")
            rng = np.random.default_rng(seed)
            vec = self.real[seed % len(self.real)] + 0.05 * rng.standard_normal(self.dim)
            out[row] = vec / np.linalg.norm(vec)
        return out


def passages(n: int, offset: int = 0) -> list[Document]:
    base: dict[str, tuple[str, str]] = {}
    for path in sorted(DATA.glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            for p in json.loads(line).get("paragraphs", []):
                base.setdefault(p["id"], (p["title"], p["text"]))
    items = list(base.values())
    out: list[Document] = []
    for i in range(offset, offset + n):
        title, text = items[i % len(items)]
        suffix = "" if i < len(items) else f" variant{i // len(items)}"
        out.append(
            Document(
                id=f"p{i}", title=title, text=text + suffix, metadata={"source": f"f{i // 10}"}
            )
        )
    return out


def step(store_fn: Any, embedder: SyntheticEmbedder, rate: float) -> tuple[Store, dict[str, Any]]:
    before = embedder.texts
    cpu, t = time.process_time(), time.perf_counter()
    store = store_fn()
    wall, cpu_s = time.perf_counter() - t, time.process_time() - cpu
    embedded = embedder.texts - before
    timings = store.manifest["timings_s"]
    out = {
        "passages": len(store),
        "embedded": embedded,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu_s, 2),
        "bm25_s": timings["bm25"],
        "chroma_s": timings["chroma_add"],
        "minilm_embed_s": round(embedded / rate, 1),
        "with_minilm_s": round(wall - timings["embed"] + embedded / rate, 1),
        "update": store.update,
    }
    log(json.dumps(out))
    return store, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--add", type=int, default=1_000)
    ap.add_argument("--change", type=int, default=100)
    ap.add_argument("--embed-sample", type=int, default=200)
    args = ap.parse_args()

    sample = [f"{d['title']}: {d['text']}" for d in passages(args.embed_sample)]
    minilm = MiniLMEmbedder()
    minilm.embed(sample[:8])  # load the model first
    t = time.perf_counter()
    minilm.embed(sample)
    rate = len(sample) / (time.perf_counter() - t)
    log(f"MiniLM: {rate:.1f} passages/s")

    embedder = SyntheticEmbedder()
    root = Path(tempfile.mkdtemp(prefix="gaprag-indexing-"))
    try:
        docs = passages(args.size)
        store, cold = step(
            lambda: Store.build(root / "s", docs, embedder=embedder, progress=False),
            embedder, rate,
        )  # fmt: skip
        disk = sum(p.stat().st_size for p in store.version_dir.rglob("*") if p.is_file())
        new = passages(args.add, offset=args.size)
        store, add = step(lambda: store.add(new, progress=False), embedder, rate)
        edited = [
            Document(id=d["id"], title=d["title"], text=d["text"] + " (edited)",
                     metadata=d["metadata"])
            if i % (len(docs) // args.change) == 0 and i // (len(docs) // args.change) < args.change
            else d
            for i, d in enumerate(docs)
        ]  # fmt: skip
        store, change = step(
            lambda: Store.index(root / "s", edited, embedder=embedder, progress=False),
            embedder, rate,
        )  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        json.dumps(
            {
                "size": args.size,
                "minilm_passages_per_s": round(rate, 1),
                "version_disk_mib": round(disk / 2**20, 1),
                "cold": cold,
                f"add_{args.add}": add,
                f"change_{args.change}": change,
            }
        )
    )


if __name__ == "__main__":
    main()
