"""The PNG plots of a summary: per dataset, the primary metric against tokens per question
and by iteration count; per dataset and pooled, quality per cost (the metric against LLM calls
and seconds per question, the unbeaten configurations marked)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from gaprag.eval.stats import LABELS


def plot(summary: Mapping[str, Any], out: Path) -> dict[str, list[str]]:
    """Per dataset: primary metric vs tokens per question, and by iteration count."""
    import matplotlib

    matplotlib.use("Agg")

    made: dict[str, list[str]] = {}
    (out / "plots").mkdir(parents=True, exist_ok=True)
    for name, ds in summary["datasets"].items():
        primary, label = ds["primary"], LABELS[ds["primary"]]
        made[name] = [
            _figure(
                partial(_vs_tokens, methods=ds["methods"], primary=primary),
                out,
                f"plots/{name}_{primary}_vs_tokens.png",
                xlabel="tokens per question (prompt + completion, log)",
                ylabel=f"{label} (95% CI)",
                title=f"{name}: {label} vs cost",
            ),
            _figure(
                partial(_by_iterations, methods=ds["methods"]),
                out,
                f"plots/{name}_{primary}_by_iterations.png",
                xlabel="retrieval rounds (iterations)",
                ylabel=f"mean {label}",
                title=f"{name}: {label} by iteration count",
            ),
        ]
    return made


def _figure(
    draw: Callable[[Any], None], out: Path, path: str, *, xlabel: str, ylabel: str, title: str
) -> str:
    """One plot: ``draw`` on fresh axes, then the labels, a grid and a legend of the drawn
    methods; saved at ``out / path``. Returns ``path``."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    draw(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / path, dpi=110)
    plt.close(fig)
    return path


def _vs_tokens(ax: Any, methods: Mapping[str, Any], primary: str) -> None:
    """Each method's mean with its 95% CI at its tokens per question (log scale)."""
    for m, e in methods.items():
        stat, tokens = e.get(primary) or {}, e["cost"]["tokens"]
        if stat.get("mean") is None or tokens is None:
            continue
        lo, hi = stat["ci"]
        ax.errorbar(
            [tokens],
            [stat["mean"]],
            yerr=[[stat["mean"] - lo], [hi - stat["mean"]]],
            fmt="o",
            capsize=4,
            label=m,
        )
        ax.annotate(
            m, (tokens, stat["mean"]), textcoords="offset points", xytext=(6, 4), fontsize=8
        )
    if any(e["cost"]["tokens"] for e in methods.values()):
        ax.set_xscale("log")


def _by_iterations(ax: Any, methods: Mapping[str, Any]) -> None:
    """Each method's mean by its number of retrieval rounds, each point with its count."""
    for m, e in methods.items():
        its = e["by_iterations"]
        if not its:
            continue
        xs = [int(k) for k in its]
        ax.plot(xs, [its[k]["mean"] for k in its], marker="o", label=m)
        for x, k in zip(xs, its, strict=True):
            ax.annotate(
                f"n={its[k]['n']}",
                (x, its[k]["mean"]),
                textcoords="offset points",
                xytext=(4, -10),
                fontsize=7,
            )


#: the quality-per-cost panels: (cost key, axis label)
COST_AXES: tuple[tuple[str, str], ...] = (
    ("llm_calls", "LLM calls per question"),
    ("wall_s", "seconds per question"),
)


def plot_quality_per_cost(summary: Mapping[str, Any], out: Path) -> dict[str, list[str]]:
    """Per dataset and pooled: the primary metric against LLM calls and against seconds per
    question, both with 95% intervals; the configurations no other beats on both (the
    summary's ``frontier``) are filled and joined, the others hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: list[tuple[str, str, Mapping[str, Any], Mapping[str, list[str]]]] = [
        (name, ds["primary"], ds["methods"], ds.get("frontier") or {})
        for name, ds in summary["datasets"].items()
    ]
    if summary.get("pooled"):
        groups.append(("pooled", "f1", summary["pooled"], summary.get("pooled_frontier") or {}))
    made: dict[str, list[str]] = {}
    (out / "plots").mkdir(parents=True, exist_ok=True)
    for name, primary, methods, front in groups:
        label = LABELS[primary]
        fig, axes = plt.subplots(1, len(COST_AXES), figsize=(11, 4.4), sharey=True)
        for ax, (cost, xlabel) in zip(axes, COST_AXES, strict=True):
            best = front.get(cost, [])
            line: list[tuple[float, float]] = []
            for i, (m, e) in enumerate(methods.items()):
                stat, x = e.get(primary) or {}, (e.get("cost") or {}).get(cost)
                if stat.get("mean") is None or x is None:
                    continue
                y, (ylo, yhi) = stat["mean"], stat["ci"] or (stat["mean"], stat["mean"])
                xlo, xhi = ((e.get("cost_ci") or {}).get(cost)) or (x, x)
                color = f"C{i % 10}"
                ax.errorbar(
                    [x],
                    [y],
                    xerr=[[x - xlo], [xhi - x]],
                    yerr=[[y - ylo], [yhi - y]],
                    fmt="o",
                    capsize=3,
                    color=color,
                    mfc=color if m in best else "white",
                    markersize=7,
                    label=m,
                )
                ax.annotate(m, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
                if m in best:
                    line.append((x, y))
            if len(line) > 1:
                xs, ys = zip(*sorted(line), strict=True)
                ax.step(xs, ys, where="post", color="grey", alpha=0.6, linewidth=1)
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel(f"{label} (95% CI)")
        handles, labels = axes[0].get_legend_handles_labels()
        if handles:
            axes[-1].legend(handles, labels, fontsize=8, loc="best")
        fig.suptitle(f"{name}: {label} per cost (filled: no other configuration beats it on both)")
        fig.tight_layout()
        path = f"plots/{name}_{primary}_per_cost.png"
        fig.savefig(out / path, dpi=110)
        plt.close(fig)
        made[name] = [path]
    return made
