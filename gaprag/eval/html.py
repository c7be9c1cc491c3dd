"""``report.html``: one self-contained, offline page for a run (Jinja2 template, no CDN).

The summary tables and plots (PNG, base64) are rendered into the page. Questions are one
compact JSON index rendered by a small script into a filterable table; each question's
drill-down (every method's rounds, passages shown with the gold ones marked, decisions with
``p``, every LLM prompt and reply) is gzip-compressed JSON, decoded and rendered only when the
question is opened, so a run of 1,000 questions x 6 methods stays fast.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gaprag.eval.stats import HEADROOM_NOTE, headroom_cells, unbeaten_on
from gaprag.traces import method_traces

TEMPLATE = "report.html.j2"
MAX_TEXT = 20_000  # characters kept of one prompt message or reply in the drill-down
MAX_TRACEBACK = 4_000


def _cut(text: Any, limit: int = MAX_TEXT) -> str:
    value = "" if text is None else str(text)
    if len(value) <= limit:
        return value
    return value[:limit] + f"\n… [{len(value) - limit} more characters in the trace file]"


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _outcome(row: Mapping[str, Any], base: Mapping[str, Any] | None, primary: str) -> int:
    """+1 won against the baseline on the headline metric, -1 lost, 0 tie or not comparable."""
    if base is None or row.get("error") or base.get("error"):
        return 0
    mine, theirs = _num(row.get(primary)), _num(base.get(primary))
    if mine is None or theirs is None:
        return 0
    return (mine > theirs) - (mine < theirs)


def _trace_view(trace: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a trace file the drill-down shows (long texts cut)."""
    calls = []
    for call in trace.get("llm_calls") or []:
        if not isinstance(call, Mapping):
            continue
        calls.append(
            {
                "messages": [
                    {"role": str(m.get("role", "")), "content": _cut(m.get("content"))}
                    for m in call.get("messages") or []
                    if isinstance(m, Mapping)
                ],
                "reply": _cut(call.get("reply")),
                "prompt_tokens": call.get("prompt_tokens"),
                "completion_tokens": call.get("completion_tokens"),
                "cached_tokens": call.get("cached_tokens"),
                "seconds": call.get("seconds"),
                "error": call.get("error"),
            }
        )
    return {
        "queries": [str(q) for q in trace.get("queries") or []],
        "retrievals": [
            {"query": str(r.get("query", "")), "mode": r.get("mode"), "ids": list(r.get("ids", []))}
            for r in trace.get("retrievals") or []
            if isinstance(r, Mapping)
        ],
        "shown_ids": trace.get("shown_ids"),
        "retrieved_ids": trace.get("retrieved_ids"),
        "evidence": [
            {
                **{k: e.get(k) for k in ("id", "title", "source", "round")},
                **(
                    {"origin": _origin(e["metadata"])}
                    if isinstance(e.get("metadata"), Mapping)
                    else {}
                ),
            }
            for e in trace.get("evidence") or []
            if isinstance(e, Mapping)
        ],
        "titles": dict(trace.get("titles") or {}),
        "decisions": list(trace.get("decisions") or []),
        "calls": calls,
        "error": trace.get("error"),
        "traceback": _cut(trace.get("traceback"), MAX_TRACEBACK)
        if trace.get("traceback")
        else None,
    }


def _origin(metadata: Mapping[str, Any]) -> str:
    """Where a passage comes from, as the drill-down shows it: its source (path or URL),
    page and section."""
    parts = [str(metadata["source"])] if metadata.get("source") else []
    if metadata.get("page") not in (None, ""):
        parts.append(f"p. {metadata['page']}")
    if metadata.get("section"):
        parts.append(str(metadata["section"]))
    return ", ".join(parts)[:300]


def _pack(data: Any) -> str:
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return base64.b64encode(gzip.compress(raw.encode("utf-8"), compresslevel=6)).decode("ascii")


def _script_json(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">``."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


class _Traces:
    """The traces of the report's run directories, read once per (directory, method)."""

    def __init__(self, dirs: Sequence[Path]) -> None:
        self.dirs = list(dirs)
        self._read: dict[tuple[Path, str], dict[str, dict[str, Any]]] = {}

    def find(self, method: str, qid: str) -> dict[str, Any] | None:
        for d in reversed(self.dirs):  # the last directory's trace, as the last row wins
            key = (d, method)
            if key not in self._read:
                self._read[key] = method_traces(d, method)
            found = self._read[key].get(qid)
            if found is not None:
                return found
        return None


def build_data(
    summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], dirs: Sequence[Path]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The question index (one entry per dataset and question) and the packed drill-downs."""
    baseline = str(summary.get("baseline") or "standard_rag")
    by_q: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        key = (str(row.get("dataset")), str(row.get("id")))
        by_q.setdefault(key, {})[str(row.get("method"))] = row
    datasets = summary.get("datasets") or {}
    questions: list[dict[str, Any]] = []
    details: dict[str, str] = {}
    stops: set[str] = set()
    found_traces = _Traces(dirs)
    for (ds, qid), per in by_q.items():
        info = datasets.get(ds) or {}
        primary = str(info.get("primary") or "f1")
        order = list(info.get("methods") or per)
        first = next(iter(per.values()))
        base = per.get(baseline)
        cells: dict[str, Any] = {}
        for m in order:
            if m not in per:
                continue
            row = per[m]
            stop = str(row.get("stop_reason") or "")
            stops.add(stop)
            cells[m] = {
                "p": _cut(row.get("prediction"), 500),
                "f1": _num(row.get("f1")),
                "em": _num(row.get("em")),
                "s": _num(row.get(primary)),
                "sr": _num(row.get("support_recall")),
                "rr": _num(row.get("retrieval_recall")),
                "stop": stop,
                "err": row.get("error"),
                "calls": row.get("llm_calls"),
                "tok": (_num(row.get("prompt_tokens")) or 0)
                + (_num(row.get("completion_tokens")) or 0),
                "sec": _num(row.get("wall_s")),
                "vs": 0 if m == baseline else _outcome(row, base, primary),
            }
        packed_key = f"{ds}\u241f{qid}"
        questions.append(
            {
                "k": packed_key,
                "ds": ds,
                "id": qid,
                "q": _cut(first.get("question"), 2000),
                "gold": list(first.get("answers") or []),
                "m": cells,
            }
        )
        traces = {m: found_traces.find(m, qid) for m in cells}
        found = {m: t for m, t in traces.items() if t is not None}
        if found:
            supporting: list[str] = next(
                (list(t["supporting"]) for t in found.values() if t.get("supporting")), []
            )
            details[packed_key] = _pack(
                {
                    "supporting": supporting,
                    "input": next((t.get("input") for t in found.values() if t.get("input")), ""),
                    "methods": {m: _trace_view(t) for m, t in found.items()},
                }
            )
    index = {
        "baseline": baseline,
        "datasets": {
            ds: {"methods": list((info or {}).get("methods") or []), "primary": info.get("primary")}
            for ds, info in datasets.items()
        },
        "stops": sorted(stops),
        "questions": questions,
    }
    return index, details


def _plot_uris(target: Path, plots: Mapping[str, Sequence[str]]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for ds, files in plots.items():
        for rel in files:
            path = target / rel
            if path.is_file():
                data = base64.b64encode(path.read_bytes()).decode("ascii")
                out.setdefault(ds, []).append(
                    {"name": Path(rel).stem, "src": f"data:image/png;base64,{data}"}
                )
    return out


def render_html(
    summary: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    dirs: Sequence[Path],
    target: Path,
    plots: Mapping[str, Sequence[str]],
) -> str:
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(
        loader=PackageLoader("gaprag.eval", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _format_number
    env.filters["stat"] = _format_stat
    env.filters["unbeaten_on"] = unbeaten_on
    env.filters["headroom_cells"] = headroom_cells
    index, details = build_data(summary, rows, dirs)
    return env.get_template(TEMPLATE).render(
        summary=summary,
        plots=_plot_uris(target, plots),
        index_json=_script_json(index),
        details_json=_script_json(details),
        n_questions=len(index["questions"]),
        headroom_note=HEADROOM_NOTE.replace("*", ""),
    )


def write_html(
    summary: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    dirs: Sequence[Path],
    target: Path,
    plots: Mapping[str, Sequence[str]],
) -> Path:
    """Write ``target/report.html`` (atomically) and return its path."""
    html = render_html(summary, rows, dirs, target, plots)
    path = target / "report.html"
    tmp = target / ".report.html.tmp"
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)
    return path


def _format_number(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _format_stat(stat: Any, signed: bool = False) -> str:
    if not isinstance(stat, Mapping) or stat.get("mean") is None:
        return "–"
    mean, ci = stat["mean"], stat.get("ci")
    fmt = "{:+.3f}" if signed else "{:.3f}"
    text = fmt.format(mean)
    if ci:
        text += " [" + fmt.format(ci[0]) + ", " + fmt.format(ci[1]) + "]"
    return text
