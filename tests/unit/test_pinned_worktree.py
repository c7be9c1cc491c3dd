"""scripts/pinned_worktree.sh: the pinned code of runs that span sessions (eval_n50.sh)."""

from __future__ import annotations

import subprocess
from pathlib import Path

HELPER = Path(__file__).resolve().parents[2] / "scripts" / "pinned_worktree.sh"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def pin(repo: Path, where: Path, commit: str) -> subprocess.CompletedProcess[str]:
    script = f'. "{HELPER}"; pinned_worktree "{where}" "{commit}"; echo pinned'
    return subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True)


def test_a_worktree_is_made_at_the_pin_and_refused_at_another_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "code.py").write_text("v = 1\n")
    git(repo, "add", "code.py")
    git(repo, "commit", "-qm", "one")
    first = git(repo, "rev-parse", "--short", "HEAD")
    (repo / "code.py").write_text("v = 2\n")
    git(repo, "commit", "-qam", "two")
    where = tmp_path / "pinned"
    made = pin(repo, where, first)
    assert made.returncode == 0 and made.stdout.endswith("pinned\n")
    assert (where / "code.py").read_text() == "v = 1\n"
    assert pin(repo, where, first).returncode == 0  # resumed: the same pin is accepted
    moved = pin(repo, where, "HEAD")
    assert moved.returncode == 2 and "pinned" not in moved.stdout
    assert (
        f"{where} is not at the pinned HEAD; remove it (git worktree remove {where})"
        in moved.stderr
    )
