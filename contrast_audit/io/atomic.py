"""Outputs that never destroy anything: one check before the work, one atomic write after it.

``OutputTarget`` is the single place where an output path is judged and written:

- checked before any work: ``''``, a directory, a missing or read-only directory, or a path that
  names one of the inputs (by path, through links, or by inode: hard links) is a ``ConfigError``
  (exit 2). Writability is proven by creating the temporary file beside the target at once;
- written atomically: the temporary file is filled, flushed, synced and renamed over the target, so
  readers see the old file or the whole new one. A symlink is resolved first, so the rename happens
  next to the real file and the link stays a link. A disk that fills up leaves the old file intact
  (exit 2);
- special files (``/dev/stdout``, ``/dev/null``, a FIFO, any non-regular file) are written into,
  never replaced;
- a new file gets the mode the user's umask allows (as ``open()`` would), an existing file keeps
  its mode;
- the temporary file (``.NAME.PID.XXXX.tmp``) is removed on errors, on SIGINT and SIGTERM and at
  exit; one left by a killed run (its process gone) is removed by the next write to the same target.

Typical use, for any command that writes a file::

    with OutputTarget(args.output, inputs=data_paths, option="--output") as out:
        result = long_running_work()
        out.write(render(result))

``check_output_dir`` does the same checks for a directory of outputs (``train --out DIR``); each
file inside it is then written with ``write_atomic``.
"""

from __future__ import annotations

import atexit
import errno
import os
import re
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from types import FrameType, TracebackType

from contrast_audit.errors import ConfigError

_LIVE: set[str] = set()  # temporaries of this process not yet renamed or removed
_LOCK = threading.Lock()
_HANDLERS_INSTALLED = False


def _remove_live() -> None:
    for name in list(_LIVE):
        try:
            os.unlink(name)
        except OSError:
            pass
        _LIVE.discard(name)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Remove our temporaries, then let the signal do what it would have done."""
    _remove_live()
    previous = _PREVIOUS.get(signum)
    if callable(previous):
        previous(signum, frame)
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


_PREVIOUS: dict[int, object] = {}


def _install_handlers() -> None:
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(_remove_live)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread; atexit still cleans up
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            previous = signal.getsignal(signum)
            if previous == signal.SIG_IGN:
                continue  # ignored (a background job of a script): it must stay ignored, and the run go on
            _PREVIOUS[signum] = previous
            signal.signal(signum, _on_signal)
        except (ValueError, OSError):  # pragma: no cover - embedded interpreters
            pass


def _umask() -> int:
    with _LOCK:
        mask = os.umask(0)
        os.umask(mask)
    return mask


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


# The largest process id there can be: Linux's PID_MAX_LIMIT (2^22), elsewhere what a pid_t holds.
PID_MAX = 1 << 22 if sys.platform.startswith("linux") else (1 << 31) - 1
_PID_TEXT = re.compile(r"-?[0-9]+")


def parse_pid(text: str) -> int | None:
    """The process id written in a file name (a temporary's, a spill's), or None when ``text`` is not an
    ASCII integer (``²``, ``٣``, ``+1``, ``""``): not a name this package writes, so not ours to remove.
    An integer too long for any process id reads as one past ``PID_MAX``, never as an error."""
    if not _PID_TEXT.fullmatch(text):  # not isdigit(): "²" passes it and int() refuses it
        return None
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("-").lstrip("0") or "0"
    if len(digits) > len(str(PID_MAX)):  # int() of thousands of digits raises; no pid has them
        return sign * (PID_MAX + 1)
    return sign * int(digits)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (or may: one we are not allowed to signal). Ids no
    process can have, 0 (``kill`` would signal our own process group), negative ones (a group, or every
    process) and those above ``PID_MAX``, are never alive."""
    if not 0 < pid <= PID_MAX:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):  # an id the platform's pid_t cannot hold
        return False
    except OSError:
        return True  # cannot tell: keep what may be a live run's
    return True


def stale_owner(pid_text: str) -> bool:
    """Whether a name whose process id field is ``pid_text`` was left by a process that no longer runs:
    an integer id that is not alive (0, negative, past ``PID_MAX``, or gone). Anything else is not a
    name this package writes, and is left alone."""
    pid = parse_pid(pid_text)
    return pid is not None and not pid_alive(pid)


FIFO_WAIT_S = 10.0  # how long an output FIFO may stay without a reader before it is refused


def _temp_stem(name: str) -> str:
    """The target's name as its temporaries carry it: whole when short, else cut and tagged with a digest,
    so that ``.NAME.PID.XXXXXXXX.tmp`` fits the file system's limit whenever NAME does."""
    if len(name.encode()) <= 180:
        return name
    import hashlib

    return name.encode()[:120].decode(errors="ignore") + "~" + hashlib.sha256(name.encode()).hexdigest()[:12]


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Remove ``.NAME.PID.*.tmp`` files beside ``target`` whose process no longer runs (``stale_owner``)."""
    removed: list[Path] = []
    prefix = f".{_temp_stem(target.name)}."
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        if not stale_owner(name[len(prefix) :].split(".", 1)[0]):
            continue
        try:
            os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


def _write_all(fd: int, data: str | bytes) -> None:
    view = memoryview(data.encode("utf-8") if isinstance(data, str) else data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class OutputTarget:
    """One output file, checked now and written atomically later (see the module docstring).

    Args:
        path: where the user asked the output to go.
        inputs: every file the command reads (data, plan, settings): the output may not be one of them.
        option: the flag that named ``path``, for messages (``--output``, ``--out``).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, inputs: Iterable[str | os.PathLike[str]] = (), option: str = "--output"
    ) -> None:
        self.option = option
        self._fd: int | None = None
        self._tmp: str | None = None
        self._done = False
        text = os.fspath(path)
        if not text.strip():
            raise ConfigError(f"{option} is empty", fix=f"name a file, e.g. {option} report.json")
        self.given = Path(text)
        self.special = False
        self.real = Path(os.path.realpath(text))
        self._check(text, inputs)

    # -- checks ---------------------------------------------------------------------------------
    def _check(self, text: str, inputs: Iterable[str | os.PathLike[str]]) -> None:
        option, given, real = self.option, self.given, self.real
        if text_is_dir(text):
            raise ConfigError(
                f"{option} {given} is a directory", fix=f"name a file inside it, e.g. {option} {given / 'report.json'}"
            )
        mine = _identity(real)
        for item in inputs:
            item_text = os.fspath(item)
            if item_text in ("", "-"):
                continue
            other = Path(os.path.realpath(item_text))
            ident = _identity(other)
            if other == real or (mine is not None and ident == mine):
                raise ConfigError(
                    f"{option} {given} is the input file {item_text}: writing it would destroy the data",
                    fix=f"write the report somewhere else, e.g. {option} report.json",
                )
        try:
            # The path as given first: /dev/stdout and /proc/self/fd/1 name a pipe through links that
            # realpath cannot follow ("pipe:[123]"), but the kernel can.
            st = os.stat(text)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ConfigError(
                    f"{option} {given}: is a symbolic link that loops (it points back to itself)",
                    fix="fix or remove the link, or choose another path",
                ) from exc
            if exc.errno == errno.ENAMETOOLONG:
                raise self._too_long() from exc
            raise ConfigError(
                f"{option} {given}: cannot be checked ({exc.strerror})", fix="choose another path"
            ) from exc
        if st is not None and not stat.S_ISREG(st.st_mode):
            # /dev/stdout, /dev/null, a FIFO, a terminal: written into, never replaced.
            self.special = True
            self.real = Path(text)
            if stat.S_ISFIFO(st.st_mode):
                self._fd = self._open_fifo()
            return
        if len(real.name.encode()) > _name_max(real.parent):
            raise self._too_long()
        parent = real.parent
        if not parent.is_dir():
            raise ConfigError(
                f"{option} {given}: directory {parent} does not exist", fix=f"create it first (mkdir -p {parent})"
            )
        remove_stale_temporaries(real)
        self._open_temporary()

    def _too_long(self) -> ConfigError:
        name = self.real.name or self.given.name
        return ConfigError(
            f"{self.option} {self.given}: the file name is {len(name.encode())} bytes long, more than the "
            f"{_name_max(self.real.parent)} this file system allows",
            fix="choose a shorter file name",
        )

    def _open_fifo(self) -> int:
        """Open a FIFO for writing without blocking: a FIFO that no process reads within ``FIFO_WAIT_S`` is
        refused before the work, instead of blocking forever after it."""
        import time

        deadline = time.monotonic() + FIFO_WAIT_S
        while True:
            try:
                fd = os.open(self.real, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise self._write_error(exc) from exc
                if time.monotonic() >= deadline:
                    raise ConfigError(
                        f"{self.option} {self.given}: is a FIFO that no process read from within {FIFO_WAIT_S:g} s",
                        fix="start the reader first (e.g. cat FIFO &), or write to a file",
                    ) from None
                time.sleep(0.05)
                continue
            os.set_blocking(fd, True)
            return fd

    def _open_temporary(self) -> None:
        _install_handlers()
        real = self.real
        try:
            prefix = f".{_temp_stem(real.name)}.{os.getpid()}."
            fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=real.parent)
        except OSError as exc:
            raise ConfigError(
                f"{self.option} {self.given}: cannot write in {real.parent} ({exc.strerror})",
                fix="choose a directory you can write to",
            ) from exc
        with _LOCK:
            _LIVE.add(tmp)
        self._fd, self._tmp = fd, tmp

    # -- writing --------------------------------------------------------------------------------
    def write(self, data: str | bytes | Iterable[str | bytes]) -> None:
        """Write the whole output: into a special file directly, else by rename over the target.
        ``data`` may come in pieces (an iterable of str or bytes), written as they come: the target
        is replaced only after the last piece, and an error while producing one leaves it as it was."""
        if self._done:
            raise RuntimeError("an OutputTarget is written once")
        parts = (data,) if isinstance(data, (str, bytes)) else data
        if self.special:
            self._write_special(parts)
            self._done = True
            return
        assert self._fd is not None and self._tmp is not None
        fd, tmp = self._fd, self._tmp
        try:
            for part in parts:
                _write_all(fd, part)
            os.fsync(fd)
            os.fchmod(fd, self._mode())
            os.close(fd)
            self._fd = None
            os.replace(tmp, self.real)
            with _LOCK:
                _LIVE.discard(tmp)
            self._tmp = None
            self._done = True
            self._sync_dir()
        except OSError as exc:
            self.discard()
            raise self._write_error(exc) from exc
        except BaseException:
            self.discard()
            raise

    def _write_special(self, parts: Iterable[str | bytes]) -> None:
        fd, self._fd = self._fd, None  # a FIFO was opened when it was checked
        try:
            if fd is None:
                fd = os.open(self.real, os.O_WRONLY | os.O_APPEND)
            for part in parts:
                _write_all(fd, part)
        except OSError as exc:
            raise self._write_error(exc) from exc
        finally:
            if fd is not None:
                os.close(fd)

    def _write_error(self, exc: OSError) -> ConfigError:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "the disk is full"
            fix = "free some space and run again"
        else:
            what = exc.strerror or str(exc)
            fix = "check the path and its permissions"
        kept = "" if self.special else "; the previous file, if any, is unchanged"
        return ConfigError(f"{self.option} {self.given}: writing failed ({what}){kept}", fix=fix)

    def _mode(self) -> int:
        try:
            return stat.S_IMODE(os.stat(self.real).st_mode)
        except OSError:
            return 0o666 & ~_umask()

    def _sync_dir(self) -> None:
        try:
            dfd = os.open(self.real.parent, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)

    def discard(self) -> None:
        """Remove the temporary file (nothing is written); safe to call more than once."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            with _LOCK:
                _LIVE.discard(self._tmp)
            self._tmp = None

    def __enter__(self) -> OutputTarget:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.discard()

    def __del__(self) -> None:
        if hasattr(self, "_tmp"):
            self.discard()


def _name_max(directory: Path) -> int:
    try:
        return int(os.pathconf(directory if directory.is_dir() else "/", "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def text_is_dir(path: str) -> bool:
    """True for an existing directory or a path written as one (ending in ``/``)."""
    return path.endswith(os.sep) or os.path.isdir(path)


def check_output_dir(
    path: str | os.PathLike[str], *, inputs: Iterable[str | os.PathLike[str]] = (), option: str = "--out"
) -> Path:
    """Check a directory of outputs before the work: not ``''``, not a file, not holding an input
    path itself, and writable (created if missing, with its parents). Returns the resolved path;
    write each file in it with ``write_atomic``."""
    text = os.fspath(path)
    if not text.strip():
        raise ConfigError(f"{option} is empty", fix=f"name a directory, e.g. {option} out/")
    real = Path(os.path.realpath(text))
    if real.exists() and not real.is_dir():
        raise ConfigError(f"{option} {text} is a file, not a directory", fix="name a directory")
    for item in inputs:
        item_text = os.fspath(item)
        if item_text not in ("", "-") and Path(os.path.realpath(item_text)) == real:
            raise ConfigError(f"{option} {text} is the input {item_text}", fix="name another directory")
    try:
        real.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".check.{os.getpid()}.", suffix=".tmp", dir=real)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ConfigError(
            f"{option} {text}: cannot write there ({exc.strerror})", fix="choose a directory you can write to"
        ) from exc
    return real


def write_atomic(
    path: str | os.PathLike[str], data: str | bytes, *, inputs: Iterable[str | os.PathLike[str]] = ()
) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one
    (creating missing parent directories)."""
    real = Path(os.path.realpath(os.fspath(path)))
    if os.fspath(path).strip() and not real.parent.exists():
        real.parent.mkdir(parents=True, exist_ok=True)
    with OutputTarget(path, inputs=inputs, option="output") as out:
        out.write(data)
