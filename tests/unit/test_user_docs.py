"""The user documents (README.md, docs/, benchmarks/): a short README, no words of the project's
own process, and relative links that lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
USER_DOCS = (ROOT / "README.md", ROOT / "docs", ROOT / "benchmarks")
README_MAX_LINES = 250
#: the words a user document must not use, as ``grep -rniE`` finds them in lower-cased text:
#: issue numbers and the project's work names
PROCESS_WORDS = re.compile(rb"issue ?#?[0-9]+|issue's|small-model work")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def files(*roots: Path) -> list[Path]:
    out: list[Path] = []
    for root in roots:
        out += [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return out


def markdown_pages() -> list[Path]:
    return [p for p in files(*USER_DOCS) if p.suffix == ".md"]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces to ``-``."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#{1,6} (.+)", line)):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_readme_is_at_most_250_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES


def test_user_documents_do_not_speak_of_issues() -> None:
    hits = []
    for path in files(*USER_DOCS):
        data = path.read_bytes().lower()
        if b"issue" not in data and b"small-model work" not in data:
            continue  # most result files: a substring test is much faster than the pattern
        hits += [f"{path.relative_to(ROOT)}: {m.group().decode(errors='replace')!r}"
                 for m in PROCESS_WORDS.finditer(data)]  # fmt: skip
    assert hits == []


def test_process_word_pattern_finds_what_it_forbids() -> None:
    for text in (b"After issue 16:", b"issue #35", b"the issue's target", b"The Small-Model Work"):
        assert PROCESS_WORDS.search(text.lower()), text
    assert not PROCESS_WORDS.search(b"issued in 1963; the first issue")


def test_relative_links_lead_to_existing_files_and_headings() -> None:
    broken = []
    for page in markdown_pages():
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # code blocks hold no links
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_slug_matches_github_anchors() -> None:
    assert slug("Concurrency: `--concurrency N`") == "concurrency---concurrency-n"
    assert slug("Calibration of the default δ") == "calibration-of-the-default-δ"
    assert slug("The embedded server's engine") == "the-embedded-servers-engine"
