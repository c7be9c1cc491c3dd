"""Model profiles: the decision thresholds and switches that suit one model.

A small model's judges are biased (the 1.5B model's IterKey validator said "valid" on 118 of
120 questions), so the paper's threshold of 0.5 on a yes/no choice is wrong for it. A profile,
written by ``gaprag calibrate --model NAME`` from calibration questions (index 60 on of the
bundled sets, never the evaluation questions), holds per method the settings that suit that
model: ``gaprag/profiles/<model>.toml``::

    model = "qwen2.5-coder-1.5b"
    [iterkey]
    validation_threshold = 0.93

Precedence, lowest first: the method's defaults (the paper's values), the profile of the model
in use, settings given at build time (``build_graph(..., top_k=3)``, ``--set``), settings given
at run time (``context={...}``, Studio's form). A profile applies only when its model is the one
the graph is built with: the ``llm`` passed in, else ``GAPRAG_MODEL`` at ``GAPRAG_BASE_URL``,
else the embedded model (``GAPRAG_LOCAL_MODEL``). Model names are compared without their
organisation prefix, ``-instruct`` and quantisation suffixes and ``.gguf``, so
``Qwen/Qwen2.5-Coder-1.5B-Instruct`` served by vLLM uses the same profile as the embedded
GGUF. ``profile=None`` (``--profile none``) turns profiles off.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from gaprag.context import current_names
from gaprag.errors import InputError

_QUANT = re.compile(r"[-_.](q\d[\w]*|f16|fp16|bf16|f32|gguf|awq|gptq|int[48])$", re.I)
_SUFFIXES = ("-instruct", "-chat", "-it")


def normalize(name: str) -> str:
    """A model name as profiles match it: lower case, no organisation, no quantisation or
    ``-instruct`` suffix, no ``.gguf``."""
    text = name.strip().lower().rsplit("/", 1)[-1]
    if text.endswith(".gguf"):
        text = text[: -len(".gguf")]
    changed = True
    while changed:
        changed = False
        stripped = _QUANT.sub("", text)
        for suffix in _SUFFIXES:
            if stripped.endswith(suffix):
                stripped = stripped[: -len(suffix)]
        if stripped != text:
            text, changed = stripped, True
    return text


@dataclass(frozen=True)
class Profile:
    """One model's settings per method, and where they came from."""

    model: str
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = ""  # e.g. "gaprag/profiles/qwen2.5-coder-1.5b.toml"
    notes: dict[str, Any] = field(default_factory=dict)  # how it was calibrated

    @property
    def label(self) -> str:
        return f"profile {self.model}"

    def settings(self, method: str) -> dict[str, Any]:
        return dict(self.methods.get(method, {}))


def parse_profile(text: str, source: str = "") -> Profile:
    data = tomllib.loads(text)
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise InputError(f"model profile {source or '(text)'} has no `model` name")
    methods = {k: dict(v) for k, v in data.items() if isinstance(v, dict) and k != "calibration"}
    notes = dict(data.get("calibration", {}))
    return Profile(model=model, methods=methods, source=source, notes=notes)


def shipped_profiles() -> dict[str, Profile]:
    """The profiles shipped in this package, by normalised model name."""
    out: dict[str, Profile] = {}
    for entry in resources.files(__package__).iterdir():
        if entry.name.endswith(".toml"):
            prof = parse_profile(entry.read_text(encoding="utf-8"), f"gaprag/profiles/{entry.name}")
            out[normalize(prof.model)] = prof
    return out


def load_profile(name_or_path: str | Path) -> Profile:
    """A profile by model name (shipped) or from a TOML file."""
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.is_file():
        return parse_profile(path.read_text(encoding="utf-8"), str(path))
    found = shipped_profiles().get(normalize(str(name_or_path)))
    if found is None:
        raise InputError(
            f"no model profile for {name_or_path!r}",
            hint="shipped: " + ", ".join(sorted(shipped_profiles())) + "; or pass a .toml file",
        )
    return found


def profile_for(model: str | None) -> Profile | None:
    """The shipped profile of ``model``, if there is one."""
    if not model:
        return None
    return shipped_profiles().get(normalize(model))


def model_in_use(llm: Any = None) -> str | None:
    """The model name a graph built with ``llm`` (None: the default) will talk to, if known."""
    from gaprag import config

    if llm is None:
        if config.base_url():
            return config.model_name()
        return config.local_model()
    chat = getattr(llm, "chat", llm)
    for attr in ("model_name", "model", "model_id"):
        value = getattr(chat, attr, None)
        if isinstance(value, str) and value and value != "default":
            return value
    return None


def apply_profile(
    method: str,
    options: Mapping[str, Any],
    profile: Profile | None,
    fields: set[str],
) -> tuple[dict[str, Any], dict[str, str]]:
    """(merged options, source of each set value): the profile's settings for ``method``
    under the explicit ``options``, both under today's setting names
    (:func:`gaprag.context.current_names`). A profile key the method does not have is
    refused (an InputError naming it), not dropped: a setting renamed or removed since the
    profile was written would otherwise change the run without a word."""
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if profile is not None:
        for key, value in current_names(profile.settings(method)).items():
            if key not in fields:
                close = difflib.get_close_matches(key, fields, n=1)
                raise InputError(
                    f"{profile.source or profile.label}: [{method}] has no setting {key!r}",
                    hint=(f"did you mean {close[0]!r}? " if close else "")
                    + f"{method}'s settings: {', '.join(sorted(fields))}",
                )
            merged[key] = value
            sources[key] = profile.label
    for key, value in current_names(options).items():
        merged[key] = value
        sources[key] = "explicit"
    return merged, sources


def resolve(profile: Any, llm: Any = None) -> Profile | None:
    """The profile a build uses: ``"auto"`` (the model in use's shipped profile), None or
    ``"none"`` (no profile), a :class:`Profile`, a model name or a ``.toml`` path."""
    if profile is None or profile == "none":
        return None
    if isinstance(profile, Profile):
        return profile
    if profile == "auto":
        return profile_for(model_in_use(llm))
    return load_profile(str(profile))
