"""Write gaprag/data/demo/minilm_vectors.npz: MiniLM vectors of the demo corpus (float16).

    python scripts/make_demo_vectors.py [--from-store DIR]

With ``--from-store`` the vectors are read from an existing store of the same corpus (no
embedding); otherwise the corpus is embedded with the packaged MiniLM.
"""

from __future__ import annotations

import argparse

import numpy as np

from gaprag.stores.demo import demo_corpus_path, demo_vectors_path
from gaprag.stores.documents import load_jsonl, passage_text
from gaprag.stores.embeddings import default_embedder
from gaprag.stores.store import Store


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--from-store")
    args = ap.parse_args()
    docs = load_jsonl(demo_corpus_path())
    ids = [d["id"] for d in docs]
    if args.from_store:
        store = Store.open(args.from_store)
        got = store.dense_index().collection.get(ids=ids, include=["embeddings"])
        by_id = dict(zip(got["ids"], got["embeddings"], strict=True))
        vectors = np.asarray([by_id[i] for i in ids], dtype=np.float32)
    else:
        vectors = default_embedder().embed([passage_text(d) for d in docs], progress=True)
    np.savez_compressed(
        demo_vectors_path(), ids=np.asarray(ids), vectors=vectors.astype(np.float16)
    )
    print(f"wrote {len(ids)} vectors to {demo_vectors_path()}")


if __name__ == "__main__":
    main()
