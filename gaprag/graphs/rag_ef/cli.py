"""``gaprag feedback add|import|list|remove|synthesize``: manage the RAG-EF pair store."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gaprag.errors import InputError
from gaprag.stores.documents import read_jsonl

STORE_HELP = "pair store file (default: GAPRAG_HOME/feedback.sqlite)"


def _store(args: argparse.Namespace) -> Any:
    from gaprag.graphs.rag_ef.feedback import default_store_path
    from gaprag.stores.pairs import PairStore

    return PairStore.open(args.store or default_store_path())


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}", hint="give a readable UTF-8 file") from None


def cmd_add(args: argparse.Namespace) -> int:
    chunk = args.chunk if args.chunk is not None else None
    if args.chunk_file:
        if chunk is not None:
            raise InputError("give --chunk or --chunk-file, not both", hint="drop one of them")
        chunk = _read_text(args.chunk_file)
    if chunk is None:
        raise InputError(
            "the supporting chunk is missing",
            hint='gaprag feedback add -q "..." -a "..." --chunk "passage that supports it"',
        )
    pid = _store(args).add(
        args.question, args.answer, chunk, source=args.source, chunk_id=args.chunk_id
    )
    print(pid)
    return 0


def _records(path: str) -> list[tuple[int, dict[str, Any]]]:
    out: list[tuple[int, dict[str, Any]]] = []
    hint = 'each line must be {"question": ..., "answer": ..., "chunk": ...}'
    for lineno, record in read_jsonl(path, hint=hint):
        for key in ("question", "answer", "chunk"):
            value = record.get(key)
            if not isinstance(value, str) or not value.strip():
                raise InputError(
                    f"{path}:{lineno}: field {key!r} is missing or empty",
                    hint='each line must be {"question": ..., "answer": ..., "chunk": ...}',
                )
        out.append((lineno, record))
    if not out:
        raise InputError(f"{path}: no records", hint="a JSONL file, one pair a line")
    return out


def cmd_import(args: argparse.Namespace) -> int:
    records = _records(args.file)  # validate everything before writing anything
    store = _store(args)
    by_source: dict[str, list[dict[str, Any]]] = {}
    for _, rec in records:
        by_source.setdefault(str(rec.get("source") or args.source), []).append(rec)
    total = 0
    for source, recs in by_source.items():
        ids = store.add_many(
            [(r["question"], r["answer"], r["chunk"]) for r in recs],
            source=source,
            chunk_ids=[str(r["chunk_id"]) if r.get("chunk_id") else None for r in recs],
            progress=not args.quiet,
        )
        total += len(ids)
    print(f"imported {total} pairs into {store.path} (store now holds {len(store)})")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    pairs = _store(args).list(source=args.source)
    if args.limit is not None:
        pairs = pairs[-args.limit :] if args.limit > 0 else []
    if args.json:
        for p in pairs:
            print(json.dumps(p, ensure_ascii=False))
        return 0
    for p in pairs:
        chunk = " ".join(p["chunk"].split())
        print(f"{p['id']}  [{p['source']}]  Q: {p['question']}  A: {p['answer']}")
        print(f"    chunk {p['chunk_id']}: {chunk[:100]}{'...' if len(chunk) > 100 else ''}")
    print(f"{len(pairs)} pair(s)", file=sys.stderr)
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    store = _store(args)
    missing = [pid for pid in args.ids if not store.remove(pid)]
    for pid in args.ids:
        if pid not in missing:
            print(f"removed {pid}")
    if missing:
        raise InputError(
            f"no pair with id {', '.join(missing)}", hint="see the ids with `gaprag feedback list`"
        )
    return 0


def _corpus(sources: list[str], chunk_size: int, overlap: int) -> list[Any]:
    from gaprag.stores.loaders import load_documents

    paths: list[str] = []
    for raw in sources:
        if Path(raw).exists():
            paths.append(raw)
            continue
        from gaprag.datasets import resolve

        paths.append(str(resolve(raw)[1]))  # a bundled dataset name: its paragraph union
    return load_documents(paths, chunk_size=chunk_size, overlap=overlap)


def cmd_synthesize(args: argparse.Namespace) -> int:
    from gaprag.context import BaseContext
    from gaprag.deps import Deps
    from gaprag.graphs.rag_ef.synth import synthesize

    if args.concurrency < 1:
        raise InputError(
            f"--concurrency must be >= 1, not {args.concurrency}", hint="use 1 or more"
        )
    docs = _corpus(args.corpus, args.chunk_size, args.overlap)
    store = _store(args)
    llm = Deps().chat(BaseContext(base_url=args.base_url or "", model=args.model or ""))
    report = synthesize(
        store,
        docs,
        llm,
        source=args.source,
        limit=args.limit,
        progress=not args.quiet,
        concurrency=args.concurrency,
        prompt=args.prompt,
    )
    print(
        f"synthesized {report.pairs} pairs from {report.processed} chunk(s) "
        f"({report.empty} without pairs, {report.skipped} done before); "
        f"{store.count(source=args.source)} {args.source} pairs in {store.path}"
    )
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "feedback",
        help="RAG-EF expert feedback store: add, import, list, remove, synthesize",
        description="Manage the (question, answer, chunk) pair store that rag_ef retrieves from.",
    )
    sub = p.add_subparsers(dest="feedback_command", required=True)

    q = sub.add_parser("add", help="add one expert correction")
    q.add_argument("-q", "--question", required=True)
    q.add_argument("-a", "--answer", required=True)
    q.add_argument("--chunk", help="the passage that supports the answer")
    q.add_argument("--chunk-file", help="read the supporting passage from this file")
    q.add_argument("--chunk-id", help="id of the chunk (default: a hash of its text)")
    q.add_argument("--source", default="expert", help="provenance label (default: expert)")
    q.add_argument("--store", help=STORE_HELP)
    q.set_defaults(func=cmd_add)

    q = sub.add_parser("import", help='add pairs from JSONL {"question","answer","chunk"}')
    q.add_argument("file")
    q.add_argument("--source", default="expert", help="label for records without 'source'")
    q.add_argument("--store", help=STORE_HELP)
    q.add_argument("--quiet", action="store_true", help="no progress bar")
    q.set_defaults(func=cmd_import)

    q = sub.add_parser("list", help="show the stored pairs")
    q.add_argument("--source", help="only this source (expert, synthetic, oracle, ...)")
    q.add_argument("--limit", type=int, help="only the newest N")
    q.add_argument("--json", action="store_true", help="one JSON object per line")
    q.add_argument("--store", help=STORE_HELP)
    q.set_defaults(func=cmd_list)

    q = sub.add_parser("remove", help="delete pairs by id")
    q.add_argument("ids", nargs="+")
    q.add_argument("--store", help=STORE_HELP)
    q.set_defaults(func=cmd_remove)

    q = sub.add_parser(
        "synthesize",
        help="build the synthetic set S: LLM-written Q&A pairs for every corpus chunk",
        description="Resumable: chunks already done are skipped, so rerun after an interruption.",
    )
    q.add_argument("corpus", nargs="+", help="JSONL {id,title,text}, dataset JSONL or name, folder")
    q.add_argument("--limit", type=int, help="generate for at most N new chunks in this run")
    q.add_argument("--source", default="synthetic", help="label for the pairs (default: synthetic)")
    q.add_argument("--chunk-size", type=int, default=100, help="words per chunk for text files")
    q.add_argument("--overlap", type=int, default=0, help="words of overlap for text files")
    q.add_argument("--base-url", help="OpenAI-compatible endpoint (default: configured/embedded)")
    q.add_argument("--model", help="model name at the endpoint")
    q.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="LLM calls in flight at once (default 1; more for an endpoint that serves several "
        "requests together: vLLM, or the embedded server with GAPRAG_LOCAL_SLOTS)",
    )
    q.add_argument(
        "--prompt",
        choices=("tuned", "paper"),
        default="tuned",
        help="the instruction: tuned (answerable from the passage alone, short answers; "
        "default) or paper (the paper's Appendix A instruction alone); give each its own "
        "--source",
    )
    q.add_argument("--store", help=STORE_HELP)
    q.add_argument("--quiet", action="store_true", help="no progress bar")
    q.set_defaults(func=cmd_synthesize)
