"""How a store grows: a local store (bm25s + Chroma in a folder) at increasing sizes, and a
Milvus collection on Milvus Lite's development server at 10k and 100k passages.

Passages are synthetic: 60 words drawn from a Zipf distribution over 50,000 made-up words, each
with a title of two of them and a ``source`` in its metadata; queries are 5 such words. Vectors
are random 384-d unit vectors seeded by the text (the shape of the shipped MiniLM's), so the
times exclude embedding (MiniLM embeds ~20 passages/s on this machine's CPU: embed elsewhere, or
through an embeddings endpoint, at these sizes).

For each local size, child processes: one builds the store (``Store.build``: index time,
peak memory), then one per BM25 loading (``Store.open(bm25_mmap=False)`` and ``True``) opens it
and runs the queries (open time, memory to serve, query p50 per mode). ``--bm25-only`` sizes
measure the BM25 index alone the same way (``BM25Index.build`` from a stream of the same
passages, then ``BM25Index.load`` with and without memory-mapping): it is cheap enough to go
several times further than a whole store on one machine. Memory is the process's peak resident
set (``ru_maxrss``) and, after the queries, its anonymous and file-backed parts (``RssAnon``,
``RssFile``: memory-mapped pages are file-backed, shared between processes and reclaimable). For Milvus, the server is started on a free loopback port and the passages are written
with ``MilvusStore.index`` given the vectors; its peak memory is the server process's
(``VmHWM``). The development server is a Python reimplementation of part of Milvus: its speed is
not a Milvus cluster's, and no cluster was measured.

    nice -n 10 python benchmarks/store_scale.py --local 10000,100000,1000000 \\
        --milvus 10000,100000 --out benchmarks/results_store_scale.json
    nice -n 10 python benchmarks/store_scale.py --local 2000000 --bm25-only 1000000,2000000 \\
        --milvus "" --work /var/tmp/store-scale --keep --resume \\
        --out benchmarks/results_store_scale_ceiling.json

Results are written to ``--out`` after every step (a long run keeps what it measured).
``--resume`` keeps the rows already in ``--out`` and measures only the missing ones;
``--work DIR --keep`` builds in DIR and keeps each built store and its build record
(``local-SIZE.build.json``), so an interrupted run resumes after the build it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

DIM = 384
WORDS = 50_000
PASSAGE_WORDS = 60
QUERIES = int(os.environ.get("STORE_SCALE_QUERIES", "50"))  # --milvus-queries sets it there


def recorded_command(args: Sequence[str]) -> str:
    """The command line as a results file records it: shell-quoted, the ``--work`` folder (a
    path of the measuring machine) written as ``DIR``."""
    shown = list(args)
    for i, arg in enumerate(shown[:-1]):
        if arg == "--work":
            shown[i + 1] = "DIR"
    return shlex.join(["python", "benchmarks/store_scale.py", *shown])


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def vocabulary() -> list[str]:
    rng = np.random.default_rng(7)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=int(n))) for n in rng.integers(4, 10, size=WORDS)]


def passages(n: int) -> Iterator[dict[str, Any]]:
    """``n`` synthetic passages, the same for every run."""
    words = vocabulary()
    rng = np.random.default_rng(11)
    for i in range(n):
        ids = np.minimum(rng.zipf(1.3, size=PASSAGE_WORDS + 2), WORDS) - 1
        text = " ".join(words[j] for j in ids[2:])
        yield {"id": f"doc{i // 10}.md#{i % 10}", "title": f"{words[ids[0]]} {words[ids[1]]}",
               "text": text, "metadata": {"source": f"doc{i // 10}.md"}}  # fmt: skip


def queries() -> list[str]:
    words = vocabulary()
    rng = np.random.default_rng(13)
    return [" ".join(words[j] for j in rng.integers(0, 2000, size=5)) for _ in range(QUERIES)]


class RandomEmbedder:
    """Random unit vectors seeded by the text: MiniLM's shape, no model."""

    name = "random-384"
    dim = DIM
    spec: ClassVar[dict[str, str]] = {"kind": "name", "name": "random-384"}

    def embed(self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False) -> Any:
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            seed = int.from_bytes(text.encode()[:8].ljust(8, b"\0"), "little") ^ len(text)
            v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
            out[row] = v / np.linalg.norm(v)
        return out


def peak_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def rss_mib(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def resident() -> dict[str, float]:
    """The process's resident memory now: anonymous (its own) and file-backed (mapped files)."""
    return {"rss_anon_mib": rss_mib("RssAnon"), "rss_file_mib": rss_mib("RssFile")}


def disk_mib(root: Path) -> int:
    return round(sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20)


def p50s(search: Callable[[str], object], prefix: str) -> dict[str, float]:
    """The median wall time of a query, and its median CPU time (the process's, every thread):
    on a machine shared with other work the CPU time is the steadier of the two."""
    search(queries()[0])  # warm
    wall, cpu = [], []
    for q in queries():
        t0, c0 = time.perf_counter(), time.process_time()
        search(q)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {f"{prefix}_p50_ms": round(1000 * statistics.median(wall), 2),
            f"{prefix}_cpu_p50_ms": round(1000 * statistics.median(cpu), 2)}  # fmt: skip


def timed_queries(store: Any, modes: Sequence[str] = ("bm25", "dense", "hybrid")) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in modes:
        out.update(p50s(lambda q, mode=mode: store.search(q, 5, mode=mode), mode))
    return out


# -- one step in a child process -----------------------------------------------------------
def local_build(root: Path, size: int) -> dict[str, Any]:
    from gaprag.stores.store import Store

    docs = list(passages(size))
    before = rss_mib()
    t0 = time.perf_counter()
    store = Store.build(root, docs, embedder=RandomEmbedder(), progress=False, batch_size=256)
    took = time.perf_counter() - t0
    return {"index_s": round(took, 1), "build_peak_mib": peak_mib(), "rss_before_mib": before,
            "timings_s": store.manifest["timings_s"]}  # fmt: skip


def local_serve(root: Path, mmap: bool) -> dict[str, Any]:
    from gaprag.stores.store import Store

    t0 = time.perf_counter()
    store = Store.open(root, embedder=RandomEmbedder(), bm25_mmap=mmap)
    opened = time.perf_counter() - t0
    out = {"open_s": round(opened, 2), **timed_queries(store)}
    out["serve_peak_mib"] = peak_mib()
    return {**out, **resident()}


def bm25_build(root: Path, size: int) -> dict[str, Any]:
    from gaprag.stores.bm25 import BM25Index

    before = rss_mib()
    t0 = time.perf_counter()
    BM25Index.build(f"{d['title']} {d['text']}" for d in passages(size)).save(root)
    took = time.perf_counter() - t0
    return {"index_s": round(took, 1), "build_peak_mib": peak_mib(), "rss_before_mib": before,
            "disk_mib": disk_mib(root)}  # fmt: skip


def bm25_serve(root: Path, size: int, mmap: bool) -> dict[str, Any]:
    from gaprag.stores.bm25 import BM25Index

    before = rss_mib()
    t0 = time.perf_counter()
    index = BM25Index.load(root, size, mmap=mmap)
    opened = time.perf_counter() - t0
    return {"open_s": round(opened, 2), **p50s(lambda q: index.search(q, 5), "bm25"),
            "serve_peak_mib": peak_mib(), "rss_before_mib": before, **resident()}  # fmt: skip


def milvus_run(address: str, size: int) -> dict[str, Any]:
    from gaprag.stores.milvus import MilvusStore

    docs = list(passages(size))
    embedder = RandomEmbedder()
    from gaprag.stores.documents import passage_text

    vectors = {d["id"]: v for d, v in zip(docs, embedder.embed([passage_text(d) for d in docs]),
                                           strict=True)}  # fmt: skip
    t0 = time.perf_counter()
    store = MilvusStore.index(address, docs, embedder=embedder, language="none", vectors=vectors,
                              progress=False)  # fmt: skip
    took = time.perf_counter() - t0
    return {"index_s": round(took, 1), **timed_queries(store), "client_peak_mib": peak_mib()}


def child(step: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--step", step, *args]
    done = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})}
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1][:300] if done.stderr else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def server_hwm(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def commit() -> str:
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", default="10000,100000,1000000")
    parser.add_argument("--bm25-only", default="", help="sizes of a BM25 index alone")
    parser.add_argument("--work", help="build here (default: a temporary folder, removed)")
    parser.add_argument("--keep", action="store_true", help="keep what is built in --work")
    parser.add_argument("--resume", action="store_true", help="keep the rows --out has")
    parser.add_argument("--milvus", default="10000,100000")
    parser.add_argument(
        "--milvus-queries",
        type=int,
        default=10,
        help="queries per mode on Milvus Lite (its BM25 takes seconds)",
    )
    parser.add_argument("--out", default=str(Path(__file__).with_name("results_store_scale.json")))
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.step:
        steps = {"local_build": lambda a: local_build(Path(a[0]), int(a[1])),
                 "local_serve": lambda a: local_serve(Path(a[0]), a[1] == "mmap"),
                 "bm25_build": lambda a: bm25_build(Path(a[0]), int(a[1])),
                 "bm25_serve": lambda a: bm25_serve(Path(a[0]), int(a[1]), a[2] == "mmap"),
                 "milvus": lambda a: milvus_run(a[0], int(a[1]))}  # fmt: skip
        print(json.dumps(steps[opts.step](opts.args)))
        return
    out_path = Path(opts.out)
    previous = json.loads(out_path.read_text()) if opts.resume and out_path.is_file() else {}
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"), "commit": commit(), "cpus": os.cpu_count(),
        "passages": f"synthetic, {PASSAGE_WORDS} Zipf words + a 2-word title",
        "vectors": f"random {DIM}-d unit vectors (no embedding in the times)",
        "command": recorded_command(sys.argv[1:]),
        "memory_total_mib": round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20),
        "local": {}, "bm25_only": {}, "milvus_lite": {}, "load_average_at_start": os.getloadavg(),
    }  # fmt: skip
    for part in ("local", "bm25_only", "milvus_lite"):
        done = {k: v for k, v in previous.get(part, {}).items() if "error" not in v}
        results[part].update(done)
    if previous:
        earlier = {k: previous[k] for k in ("date", "commit", "command") if k in previous}
        results["runs"] = [*previous.get("runs", []), earlier]
    stamp = {"date": results["date"], "commit": results["commit"]}

    def save() -> None:
        out_path.write_text(json.dumps(results, indent=2) + "\n")

    work = Path(opts.work) if opts.work else Path(tempfile.mkdtemp(prefix="store-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    keep = bool(opts.work and opts.keep)
    loadings = ("in_memory", "mmap")
    try:
        for size in [int(s) for s in opts.local.split(",") if s]:
            if str(size) in results["local"]:
                continue
            root, record = work / f"local-{size}", work / f"local-{size}.build.json"
            if keep and record.is_file():
                log(f"local store, {size:,} passages: built before ({record})")
                row = json.loads(record.read_text())
            else:
                log(f"local store, {size:,} passages: build")
                row = child("local_build", str(root), str(size))
                if keep and "error" not in row:
                    record.write_text(json.dumps(row))
            if "error" not in row:
                row["disk_mib"] = disk_mib(root)
                for loading in loadings:
                    log(f"local store, {size:,} passages: open ({loading}) and query")
                    row[f"serve_bm25_{loading}"] = child("local_serve", str(root), loading)
            results["local"][str(size)] = {**row, **stamp}
            save()
            if not keep:
                shutil.rmtree(root, ignore_errors=True)
        for size in [int(s) for s in opts.bm25_only.split(",") if s]:
            if str(size) in results["bm25_only"]:
                continue
            root = work / f"bm25-{size}"
            log(f"BM25 alone, {size:,} passages: build")
            row = child("bm25_build", str(root), str(size))
            if "error" not in row:
                for loading in loadings:
                    log(f"BM25 alone, {size:,} passages: load ({loading}) and query")
                    row[f"serve_{loading}"] = child("bm25_serve", str(root), str(size), loading)
            results["bm25_only"][str(size)] = {**row, **stamp}
            save()
            if not keep:
                shutil.rmtree(root, ignore_errors=True)
        sizes = [int(s) for s in opts.milvus.split(",") if s]
        if sizes:
            port = free_port()
            lite = Path(sys.executable).with_name("milvus-lite")
            server = subprocess.Popen(
                [str(lite), "server", "--data-dir", str(work / "milvus"), "--host", "127.0.0.1",
                 "--port", str(port)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            try:
                time.sleep(8)
                for size in sizes:
                    log(f"Milvus Lite, {size:,} passages")
                    row = child(
                        "milvus", f"milvus://127.0.0.1:{port}/scale_{size}", str(size),
                        env={"STORE_SCALE_QUERIES": str(opts.milvus_queries)},
                    )  # fmt: skip
                    row["queries_per_mode"] = opts.milvus_queries
                    row["server_peak_mib"] = server_hwm(server.pid)
                    results["milvus_lite"][str(size)] = row
                    save()
            finally:
                os.killpg(server.pid, signal.SIGTERM)
                server.wait(timeout=30)
    finally:
        if not opts.work:
            shutil.rmtree(work, ignore_errors=True)
    results["load_average_at_end"] = os.getloadavg()
    save()
    log(f"written {out_path}")


if __name__ == "__main__":
    main()
