"""Memory: what an audit will need, what the machine has, and a refusal before the costly stages.

An audit holds its rows, their distinct texts and, per text, MinHash band keys, normal forms and (with
embeddings) vectors; its peak grows with the distinct texts. The estimates below are fitted to the
measurements in docs/benchmarks.md (the synthetic 1,000,000-row file of ``bench/scan_scale.py``:
193 MB of JSON Lines, 2,970,528 distinct texts, 1.6 GB after loading and normalising, 2.7 GB peak with
lexical evidence) and err on the high side. ``--max-memory`` (default ``auto``: what the machine, or
the container's memory limit, has available when the audit starts) is checked twice: against the
input's size before it is read, and against the distinct texts once they are known, before any
evidence is computed. A refusal is exit 2 and names the flag; ``--max-memory off`` turns the check off.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from contrast_audit.errors import ConfigError, InputError

LOAD_BYTES_PER_INPUT_BYTE = 9  # loading and normalising: 1.6 GB for 193 MB of JSON Lines (8.2x)
BASE_BYTES = 256 << 20  # the interpreter, polars, numpy and the package
BYTES_PER_TEXT = 1000  # a distinct text's frames, keys and band keys (2.7 GB / 2.97M texts, lexical)
BYTES_PER_TEXT_BYTE = 4  # its raw, normal and shingled forms, for long texts
BYTES_PER_VECTOR_FLOAT = 6  # each embedding space holds float32 vectors and their float16 cache form

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
MAX_SIZE = 1 << 50  # 1024T (1 PiB): far above any machine's memory; larger is a typo, not a limit


def parse_size(text: str, where: str = "--max-memory") -> int | None:
    """Bytes of ``16G`` / ``500MiB`` / ``2.5g`` / ``1000000`` (powers of 1024), from 1 byte to
    ``MAX_SIZE`` (1024T); None for ``off``; ``auto`` is the memory available now."""
    value = str(text).strip().lower()
    if value == "off":
        return None
    if value == "auto":
        return available_memory()
    match = _SIZE.match(value)
    number, unit = (match.group(1), _UNITS[match.group(2).lower()]) if match else ("", 1)
    # Digits before the point bound the size before any float is made: 400 digits would be inf.
    whole = number.partition(".")[0].lstrip("0")
    size = int(float(number) * unit) if match and len(whole) <= 20 else MAX_SIZE + 1
    if not match or size < 1:
        raise ConfigError(
            f"{where} must be auto, off or a size such as 16G or 500M, got {_shown(text)}",
            fix="pass e.g. --max-memory 16G (units K, M, G, T; powers of 1024)",
        )
    if size > MAX_SIZE:
        raise ConfigError(
            f"{where} is {_shown(text)}, more than the largest size accepted (1024T, 1 PiB)",
            fix="pass the memory the audit may use, e.g. --max-memory 64G, or --max-memory off for no limit",
        )
    return size


def _shown(text: object) -> str:
    shown = repr(str(text))
    return shown if len(shown) <= 40 else f"{shown[:36]}…' ({len(str(text)):,} characters)"


def available_memory(root: Path = Path("/")) -> int | None:
    """Bytes this process can still use: MemAvailable, lowered to what a cgroup limit leaves (the limit
    less the group's usage without its inactive page cache, which the kernel reclaims first, as
    container runtimes count their working set); None where neither can be read (not Linux).
    ``root``: where ``/proc`` and ``/sys`` are (tests)."""
    found: list[int] = []
    try:
        for line in (root / "proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for base, limit_name, usage_name, cache_name in (
        ("sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"),
        ("sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
    ):
        try:
            limit = (root / base / limit_name).read_text().strip()
            usage = int((root / base / usage_name).read_text().strip())
        except (OSError, ValueError):
            continue
        # Not "max", nor v1's huge "no limit" value (nor text that isdigit() takes and int() refuses).
        if limit.isascii() and limit.isdecimal() and len(limit) < 19 and int(limit) < 1 << 60:
            found.append(max(int(limit) - max(usage - _stat(root / base / "memory.stat", cache_name), 0), 0))
        break
    return min(found) if found else None


def _stat(path: Path, key: str) -> int:
    """One value of a cgroup ``memory.stat`` file (0 when absent)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def is_regular(path: Path) -> bool:
    """Whether ``path`` is a regular file (not standard input, a FIFO or a device): one that can be read twice."""
    if str(path) == "-":
        return False
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def input_bytes(paths: list[Path]) -> int:
    """Total size of the input files (stdin and unreadable entries count 0)."""
    total = 0
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            continue
        total += info.st_size if stat.S_ISREG(info.st_mode) else 0
    return total


def load_estimate(n_bytes: int) -> int:
    """Bytes needed to load and normalise ``n_bytes`` of input."""
    return BASE_BYTES + LOAD_BYTES_PER_INPUT_BYTE * n_bytes


def audit_estimate(n_texts: int, text_bytes: int, vector_spaces: int, dim: int = 384) -> int:
    """Bytes an audit of ``n_texts`` distinct texts (``text_bytes`` of them in all) needs at its peak,
    with ``vector_spaces`` embedding matrices (0 without embeddings, 2 when the query and document
    prompts differ or a first stage holds static vectors and their float16 map beside the vectors)."""
    vectors = vector_spaces * n_texts * dim * BYTES_PER_VECTOR_FLOAT
    return BASE_BYTES + BYTES_PER_TEXT * n_texts + BYTES_PER_TEXT_BYTE * text_bytes + vectors


def human(n: int, decimals: int = 0, like: int | None = None) -> str:
    """``n`` bytes in bytes, whole KiB or MiB, or in GiB with one decimal (``decimals`` more each), in the
    unit ``human(like)`` would use (``n``'s own by default)."""
    scale = n if like is None else like
    if scale < 1 << 10:
        return f"{n:,} byte{'s' if n != 1 else ''}"
    if scale < 1 << 20:
        return f"{n / (1 << 10):,.{decimals}f} KiB"
    return f"{n / (1 << 20):,.{decimals}f} MiB" if scale < 1 << 30 else f"{n / (1 << 30):,.{decimals + 1}f} GiB"


def human_up(n: int, decimals: int = 0) -> str:
    """``human(n, decimals)`` rounded up, never down: for an amount that must at least be reached."""
    if n < 1 << 10:
        return human(n)
    unit = 1 << 10 if n < 1 << 20 else 1 << 20 if n < 1 << 30 else (1 << 30) / 10
    unit /= 10**decimals
    return human(int(math.ceil(n / unit) * unit), decimals, like=n)


def decimals_apart(a: int, b: int) -> int | None:
    """The decimals ``human`` needs to print ``a`` and ``b`` (in the unit of the larger) apart (needed
    256.6 MiB, available 256.1 MiB: not 257 and 257); None when three are not enough (print bytes)."""
    like = max(a, b)
    for decimals in range(4):
        if a == b or human(a, decimals, like) != human(b, decimals, like):
            return decimals
    return None


def round_down(n: float) -> int:
    """``n`` rounded down to two significant digits (at least 1)."""
    n = max(int(n), 1)
    step = 10 ** max(len(str(n)) - 2, 0)
    return n // step * step


class MemoryRefused(InputError):
    """An input refused because it would not fit ``--max-memory``."""


def check_memory(needed: int, limit: int | None, what: str, path: str, fix: Callable[[float], str | None]) -> None:
    """Refuse (exit 2) when ``needed`` exceeds ``limit``; nothing when there is no limit. ``fix`` gets
    the share of the input that would fit and says how to split it, or gives None when a part would
    hold less than one row (or byte)."""
    if limit is None or needed <= limit:
        return
    share = (limit - BASE_BYTES) / max(needed - BASE_BYTES, 1)
    advice = fix(share) if share > 0 else f"the limit is below what a scan needs to start ({human(BASE_BYTES)})"
    decimals = decimals_apart(needed, limit)
    if decimals is None:
        shown_needed, shown_limit, total = f"{needed:,} bytes", f"{limit:,} bytes", f"{needed:,} bytes"
    else:
        shown_needed, shown_limit = human(needed, decimals, needed), human(limit, decimals, needed)
        total = human_up(needed, decimals)
    if advice is None:
        advice = (
            f"the limit is too small for even one row of it: raise --max-memory by at least "
            f"{human_up(needed - limit)} (to {total})"
        )
    raise MemoryRefused(
        path,
        f"{what} needs about {shown_needed} of memory and {shown_limit} is available (--max-memory)",
        fix=f"{advice}, or pass --max-memory off to try anyway (or a size, e.g. --max-memory 64G)",
    )


@lru_cache(maxsize=1)
def usable_cpus() -> int:
    """The CPUs this process may use: its affinity mask, capped by a cgroup v2 CPU quota (``cpu.max``)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)
