"""`gaprag index` against LangChain's loaders + splitter + Chroma on the same folder, with the
same embedder.

The folder: the bundled evaluation sets' paragraphs, one Markdown file each (``# title`` and
the text), and as many again with a distinguishing suffix until ``--files`` files (default
10,500: more than 10,000 passages). Each side runs in its own process, from reading the folder
to a persisted, searchable index:

* gaprag: ``load_corpus`` (its Markdown loader and word-measured splitter) and ``Store.build``
  (BM25 and Chroma over the same ids), as ``gaprag index FOLDER`` runs them;
* LangChain: ``DirectoryLoader`` with ``TextLoader`` (``langchain-community``), the same
  ``RecursiveCharacterTextSplitter`` settings (200 words, 40 of overlap), and
  ``langchain_chroma.Chroma.from_documents`` persisted to disk; dense only.

Both embed with the same embedder (``--embedder``): ``synthetic`` (the shipped MiniLM demo
vectors plus noise, no model: what is compared is everything but the model) or ``minilm``
(the bundled MiniLM at the threads torch takes on this machine; slow on a small machine, so
``--files`` smaller). ``speedup`` is LangChain's wall time over gaprag's (above 1: gaprag is
faster). Each side's wall and CPU time and peak memory are recorded.

The LangChain side needs ``pip install langchain-community langchain-chroma`` (not gaprag
dependencies); e.g. ``pip install --target /tmp/lc --no-deps langchain-community
langchain-chroma`` and ``PYTHONPATH=/tmp/lc``.

    python benchmarks/index_vs_langchain.py [--files 10500] [--embedder synthetic|minilm] [--out FILE]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "gaprag" / "data" / "eval"
sys.path.insert(0, str(ROOT / "benchmarks"))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def write_folder(folder: Path, files: int) -> int:
    """``files`` Markdown files of the bundled paragraphs; how many were written."""
    paragraphs: dict[str, tuple[str, str]] = {}
    for path in sorted(DATA.glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            for p in json.loads(line).get("paragraphs", []):
                paragraphs.setdefault(p["id"], (p["title"], p["text"]))
    items = list(paragraphs.values())
    folder.mkdir(parents=True)
    for n in range(files):
        title, text = items[n % len(items)]
        extra = f" (copy {n // len(items)})" if n >= len(items) else ""
        (folder / f"{n:05d}.md").write_text(
            f"# {title}{extra}\n\n{text}{extra}\n", encoding="utf-8"
        )
    return files


def embedder(kind: str) -> Any:
    if kind == "minilm":
        from gaprag.stores.embeddings import MiniLMEmbedder

        return MiniLMEmbedder()
    from indexing import SyntheticEmbedder  # benchmarks/indexing.py

    return SyntheticEmbedder()


def run_gaprag(folder: Path, out: Path, kind: str) -> int:
    from gaprag.stores import Store, load_corpus

    corpus = load_corpus([folder])
    store = Store.build(out, corpus.documents, embedder=embedder(kind), progress=False)
    return len(store)


def run_langchain(folder: Path, out: Path, kind: str) -> int:
    from langchain_chroma import Chroma
    from langchain_community.document_loaders import DirectoryLoader, TextLoader
    from langchain_core.embeddings import Embeddings
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    inner = embedder(kind)

    class Same(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [list(map(float, v)) for v in inner.embed(texts, batch_size=64)]

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

    docs = DirectoryLoader(
        str(folder), glob="**/*.md", loader_cls=TextLoader, loader_kwargs={"encoding": "utf-8"}
    ).load()
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=200, chunk_overlap=40, length_function=lambda t: len(t.split())
    )
    chunks = splitter.split_documents(docs)
    store = Chroma.from_documents(
        chunks, Same(), persist_directory=str(out), collection_metadata={"hnsw:space": "cosine"}
    )
    return int(store._collection.count())


def side(name: str, folder: Path, out: Path, kind: str) -> dict[str, Any]:
    """One side in this process: its passages, wall and CPU seconds, peak memory."""
    start, cpu = time.perf_counter(), time.process_time()
    count = (run_gaprag if name == "gaprag" else run_langchain)(folder, out, kind)
    return {
        "passages": count,
        "wall_s": round(time.perf_counter() - start, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_500)
    parser.add_argument("--embedder", choices=["synthetic", "minilm"], default="synthetic")
    parser.add_argument("--out", help="also write the result JSON here")
    parser.add_argument("--side", choices=["gaprag", "langchain"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # one side, in a process of its own
        result = side(args.side, Path(args.folder), Path(args.folder).parent / args.side,
                      args.embedder)  # fmt: skip
        print(json.dumps(result))
        return
    measured = commit()  # the code the sides run
    work = Path(tempfile.mkdtemp(prefix="gaprag-index-bench-"))
    try:
        write_folder(work / "corpus", args.files)
        results: dict[str, Any] = {}
        for name in ("gaprag", "langchain"):
            log(f"{name}: indexing {args.files} files ({args.embedder} embedder)...")
            cmd = [sys.executable, __file__, "--side", name, "--folder", str(work / "corpus"),
                   "--embedder", args.embedder]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            results[name] = json.loads(done.stdout.strip().splitlines()[-1])
            log(f"{name}: {results[name]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {
        "command": "python benchmarks/index_vs_langchain.py "
        f"--files {args.files} --embedder {args.embedder}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": measured,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        },
        "files": args.files,
        "embedder": args.embedder,
        **results,
        "speedup": round(results["langchain"]["wall_s"] / results["gaprag"]["wall_s"], 2),
    }
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
