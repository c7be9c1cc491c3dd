"""Writing a model profile (:mod:`gaprag.profiles`): the one writer ``gaprag calibrate`` and
``python -m lab replay escalation --write-profile`` use. It merges settings into the methods' tables
and how each was made into ``[calibration.<method>]``, keeping everything else in the file
(other methods, switches set by hand, the comment lines at its top)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

#: tables of an older profile's flat ``[calibration]`` record that are not a method's
_NOTE_TABLES = ("questions", "rows")


def _header(path: Path, model: str) -> str:
    """The file's comment lines at its top, or the header of a new profile."""
    if path.is_file():
        found = "".join(
            line + "\n"
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")
        )
        if found:
            return found
    return (
        f"# Model profile of {model}: written by `gaprag calibrate` (thresholds) and by hand\n"
        "# (switches, each explained on its method's page). See gaprag/profiles/__init__.py.\n"
    )


def _records(data: Mapping[str, Any]) -> dict[str, Any]:
    """``[calibration]`` as one table per method (an older profile's flat record split up)."""
    record: dict[str, Any] = dict(data.get("calibration", {}))
    if "date" in record:
        flat = {k: v for k, v in record.items() if not isinstance(v, dict) or k in _NOTE_TABLES}
        record = {k: v for k, v in record.items() if k not in flat}
        for name, n in dict(flat.get("rows", {})).items():
            record[name] = {**{k: v for k, v in flat.items() if k != "rows"}, "rows": n}
    return record


def write_profile(
    path: Path,
    settings: Mapping[str, Mapping[str, Any]],
    records: Mapping[str, Mapping[str, Any]],
    *,
    model: str | None = None,
    records_if_missing: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Write (or update) the profile at ``path``: ``settings[method]`` merged into the
    method's table, ``records[method]`` as its ``[calibration.<method>]`` record (and
    ``records_if_missing[method]`` where it has none), ``model`` as its model name."""
    data: dict[str, Any] = {}
    if path.is_file():
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    if model is not None:
        data["model"] = model
    header = _header(path, str(data.get("model", "")))
    record = _records(data)
    for method, values in settings.items():
        data.setdefault(method, {}).update(values)
    record.update({m: dict(r) for m, r in records.items()})
    for method, r in (records_if_missing or {}).items():
        record.setdefault(method, dict(r))
    data["calibration"] = record
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + tomli_w.dumps(data), encoding="utf-8")
