"""The run record, ``run.json``: the protocol of a run (dataset file hash, corpus, model,
serving settings, methods and variants with their options and resolved settings, the model
profile), kept across resumed runs, which must not mix rows made under other settings."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from gaprag.context import current_names
from gaprag.errors import InputError
from gaprag.llm.client import LLM

RUN_FILE = "run.json"

#: settings a run.json of an earlier version may name: {old name: (setting now, values kept)}
RENAMED_SETTINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "answer_style": ("reader", ("short", "paper")),
}


def current_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A method's options or settings as recorded by any version, under today's names: a
    renamed setting's value moves to its new name (unless that one was set to something other
    than its default) and the old name is dropped; settings renamed since the last release
    move as :func:`gaprag.context.current_names` moves them."""
    out = current_names(settings, warn=False)
    for old, (new, kept) in RENAMED_SETTINGS.items():
        if old not in out:
            continue
        value = out.pop(old)
        if value in kept and out.get(new, kept[0]) == kept[0]:
            out[new] = value
    return out


def current_methods(per_method: Mapping[str, Any]) -> dict[str, Any]:
    """``{method: options or settings}`` of a run.json (``methods``, ``settings``) under
    today's setting names (:func:`current_settings`)."""
    return {m: current_settings(v) if isinstance(v, Mapping) else v for m, v in per_method.items()}


def portable_path(path: str | Path) -> str:
    """A path as run.json keeps it: relative to the package, to ``$GAPRAG_HOME`` or to the
    working directory where it lies under one of them, so committed results carry no machine
    paths; any other path as given."""
    if not path:
        return ""
    from gaprag.config import gaprag_home

    resolved = Path(path).resolve()
    for base, label in (
        (Path(__file__).resolve().parents[1], "gaprag"),
        (gaprag_home().resolve(), "$GAPRAG_HOME"),
        (Path.cwd().resolve(), "."),
    ):
        if resolved.is_relative_to(base):
            return f"{label}/{resolved.relative_to(base).as_posix()}"
    return str(path)


def code_version() -> dict[str, Any]:
    """The code a run's rows come from: gaprag's version and, when gaprag runs from a git
    checkout, its commit and whether gaprag's files differ from that commit."""
    try:
        out: dict[str, Any] = {"gaprag": version("gaprag")}
    except PackageNotFoundError:
        out = {"gaprag": "0+unknown"}
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return out
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        changed = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "gaprag"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return out
    out.update(commit=commit, changed=bool(changed))
    return out


def merge_code(old: Any, new: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """run.json's ``code``: for each method, every code version its rows were made with, in
    the order first used (a resumed run adds the version it runs, if new)."""
    merged: dict[str, list[dict[str, Any]]] = {
        k: list(v) for k, v in (old or {}).items() if isinstance(v, list)
    }
    for method, versions in new.items():
        seen = merged.setdefault(method, [])
        seen.extend(v for v in versions if v not in seen)
    return merged


def _profiles_differ(old: Any, new: Any) -> bool:
    """Whether a resumed run would mix rows made under different profile settings: another
    model's profile, or other values for a method both runs have. ``old`` is False for runs
    from before profiles were recorded."""
    if old is False:
        return False
    if old is None or new is None:
        return bool(old != new)
    if old.get("model") != new.get("model"):
        return True
    before, now = old.get("settings") or {}, new.get("settings") or {}
    return any(before[k] != now.get(k, {}) for k in before if k in now)


def check_resume(run_file: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Refuse to mix results of another dataset file or other method options."""
    try:
        old = json.loads(run_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return info
    if old.get("dataset_sha256") and old["dataset_sha256"] != info["dataset_sha256"]:
        raise InputError(
            f"{run_file.parent} holds results for another version of dataset {old.get('dataset')!r}",
            hint="use a new --out directory for this dataset file",
        )
    for key, method in info.get("variants", {}).items():
        was = old.get("variants", {}).get(key)
        if was is not None and was != method:
            raise InputError(
                f"{key} was a variant of {was} in the run being resumed, now of {method}",
                hint="resume with the same --variant definitions, or use a new --out directory",
            )
    old_methods = current_methods(old.get("methods", {}))
    for method, opts in info["methods"].items():
        before = old_methods.get(method)
        if before is not None and before != json.loads(json.dumps(opts, default=str)):
            raise InputError(
                f"options for {method} differ from the run being resumed ({before} vs {opts})",
                hint="resume with the same --set values, or use a new --out directory",
            )
    if _profiles_differ(old.get("profile", False), info.get("profile")):
        raise InputError(
            f"the model profile differs from the run being resumed in {run_file.parent}",
            hint="resume with the same profile (see run.json: profile), or use a new --out directory",
        )
    merged = dict(old)
    merged.update({k: v for k, v in info.items() if k != "methods"})
    for field in ("methods", "variants", "settings", "setting_sources"):
        merged[field] = {**old.get(field, {}), **info.get(field, {})}
    merged["code"] = merge_code(old.get("code"), info.get("code", {}))
    return merged


def model_label(llm: Any, base_url: str | None, model: str | None) -> str:
    if llm is not None:
        chat = llm.chat if isinstance(llm, LLM) else llm
        name = getattr(chat, "model_name", None) or getattr(chat, "model", None)
        return f"{type(chat).__name__}:{name}" if name else type(chat).__name__
    if base_url:
        return f"{base_url} {model or ''}".strip()
    from gaprag import config

    url = config.base_url()
    if url:
        return f"{url} {config.model_name() or ''}".strip()
    return f"embedded:{config.local_model()}"
