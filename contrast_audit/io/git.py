"""Files as they are at a git revision: what ``scan --since REV`` takes as its baseline."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from contrast_audit.errors import ConfigError

GIT_TIMEOUT_S = 120


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False
        )
    except FileNotFoundError:
        raise ConfigError(
            "--since needs git, which is not installed", fix="install git, or pass --baseline REPORT.json"
        ) from None
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"git did not answer within {GIT_TIMEOUT_S} s", fix="check the repository, or pass --baseline REPORT.json"
        ) from None


def _text(out: bytes) -> str:
    return out.decode("utf-8", errors="replace").strip()


def _commit_at(rev: str, path: str, where: Path) -> tuple[Path, str] | None:
    """The root of the git work tree holding directory ``where`` (of ``path``) and ``rev``'s commit there;
    None for ``HEAD`` in a repository with no commit yet. Exit 2 when there is no work tree or no such commit."""
    top = _git(["rev-parse", "--show-toplevel"], where)
    if top.returncode != 0:
        raise ConfigError(
            f"--since {rev}: {path} is not in a git work tree ({_text(top.stderr) or 'git rev-parse failed'})",
            fix="run the scan inside the repository, or pass --baseline REPORT.json",
        )
    root = Path(_text(top.stdout))
    commit = _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], root)
    if commit.returncode != 0 and rev == "HEAD" and _git(["symbolic-ref", "--quiet", "HEAD"], root).returncode == 0:
        return None
    if commit.returncode != 0:
        raise ConfigError(
            f"--since {rev}: not a commit of the repository at {root}",
            fix="name a commit, branch or tag that exists there (git log shows them)",
        )
    return root, _text(commit.stdout)


def files_at(rev: str, paths: list[str], dest: Path) -> list[str]:
    """Write each of ``paths`` as it is at ``rev`` under ``dest`` (a folder per path, the file's own name), and
    return the written files, in ``paths``' order; a path that does not exist at ``rev`` (a file the change
    adds) is left out. Exit 2 when a path is not in a git work tree or ``rev`` is not a revision."""
    if not rev or rev.startswith("-"):
        raise ConfigError(f"--since {rev!r} is not a revision", fix="name a commit, branch or tag, e.g. --since HEAD")
    out: list[str] = []
    repos: dict[Path, tuple[Path, str] | None] = {}  # a directory's repository root and rev's commit there
    for number, path in enumerate(paths):
        where = Path(path).resolve().parent
        if where not in repos:
            repos[where] = _commit_at(rev, path, where)
        found = repos[where]
        if found is None:
            return []  # a repository with no commit yet (a first commit's pre-commit hook): every row is new
        root, commit = found
        relative = os.path.relpath(Path(path).resolve(), root.resolve())
        shown = _git(["show", f"{commit}:{Path(relative).as_posix()}"], root)
        if shown.returncode != 0:
            continue  # the file is new since rev: every row of it is new
        target = dest / str(number) / Path(path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(shown.stdout)
        out.append(str(target))
    return out
