"""The PNG plots of a summary: per dataset, the primary metric against tokens per question
and by iteration count."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gaprag.eval.stats import LABELS


def plot(summary: Mapping[str, Any], out: Path) -> dict[str, list[str]]:
    """Per dataset: primary metric vs tokens per question, and by iteration count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: dict[str, list[str]] = {}
    (out / "plots").mkdir(parents=True, exist_ok=True)
    for name, ds in summary["datasets"].items():
        primary, label = ds["primary"], LABELS[ds["primary"]]
        files: list[str] = []
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for m, e in ds["methods"].items():
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
        if any(e["cost"]["tokens"] for e in ds["methods"].values()):
            ax.set_xscale("log")
        ax.set_xlabel("tokens per question (prompt + completion, log)")
        ax.set_ylabel(f"{label} (95% CI)")
        ax.set_title(f"{name}: {label} vs cost")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = f"plots/{name}_{primary}_vs_tokens.png"
        fig.savefig(out / path, dpi=110)
        plt.close(fig)
        files.append(path)

        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for m, e in ds["methods"].items():
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
        ax.set_xlabel("retrieval rounds (iterations)")
        ax.set_ylabel(f"mean {label}")
        ax.set_title(f"{name}: {label} by iteration count")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = f"plots/{name}_{primary}_by_iterations.png"
        fig.savefig(out / path, dpi=110)
        plt.close(fig)
        files.append(path)
        made[name] = files
    return made
