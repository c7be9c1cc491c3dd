"""The PNG plots of a summary: per dataset, the primary metric against tokens per question
and by iteration count."""

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
