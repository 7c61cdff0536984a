"""OutputTarget: checked before the work, written atomically, never destroying an input."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from contrast_audit.errors import ConfigError
from contrast_audit.io import atomic
from contrast_audit.io.atomic import OutputTarget, check_output_dir, remove_stale_temporaries, write_atomic


def _temps(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text('{"anchor": "a", "positive": "b"}\n')
    return path


def test_writes_atomically_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    with OutputTarget(target) as out:
        assert len(_temps(tmp_path)) == 1  # proven writable before the work
        out.write("{}\n")
    assert target.read_text() == "{}\n"
    assert _temps(tmp_path) == []


@pytest.mark.parametrize("how", ["same path", "relative path", "symlink", "hard link"])
def test_refuses_an_input_file(tmp_path: Path, data: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    before = data.read_bytes()
    if how == "same path":
        target = data
    elif how == "relative path":
        monkeypatch.chdir(tmp_path)
        target = Path("./sub/../in.jsonl")
        (tmp_path / "sub").mkdir()
    elif how == "symlink":
        target = tmp_path / "link.jsonl"
        target.symlink_to(data)
    else:
        target = tmp_path / "hard.jsonl"
        os.link(data, target)
    with pytest.raises(ConfigError, match="is the input file"):
        OutputTarget(target, inputs=[str(data)])
    assert data.read_bytes() == before
    assert _temps(tmp_path) == []


@pytest.mark.parametrize("path", ["", "   "])
def test_refuses_empty(path: str) -> None:
    with pytest.raises(ConfigError, match="is empty"):
        OutputTarget(path)


def test_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        OutputTarget(tmp_path)
    with pytest.raises(ConfigError, match="is a directory"):
        OutputTarget(str(tmp_path / "new") + "/")


def test_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        OutputTarget(tmp_path / "missing" / "report.json")


def test_refuses_an_unwritable_place() -> None:
    with pytest.raises(ConfigError, match="cannot write"):
        OutputTarget("/proc/x")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_refuses_a_read_only_directory(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(ConfigError, match="cannot write"):
            OutputTarget(ro / "report.json")
    finally:
        ro.chmod(0o755)


def test_special_files_are_written_into() -> None:
    with OutputTarget("/dev/null") as out:
        assert out.special
        out.write("discarded")
    assert Path("/dev/null").is_char_device()


def test_fifo_is_written_into(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    with OutputTarget(fifo) as out:
        out.write("through the pipe")
    reader.join(5)
    assert got == [b"through the pipe"]
    assert fifo.is_fifo()


def test_symlink_target_is_replaced_next_to_the_real_file(tmp_path: Path) -> None:
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    real = real_dir / "report.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    with OutputTarget(link) as out:
        assert _temps(real_dir) != []
        out.write("new")
    assert link.is_symlink() and real.read_text() == "new"
    assert _temps(real_dir) == [] and _temps(tmp_path) == []


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_new_file_respects_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        write_atomic(tmp_path / "r.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "r.txt").stat().st_mode & 0o777 == 0o666 & ~mask


def test_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "r.txt"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, "new")
    assert target.stat().st_mode & 0o777 == 0o640 and target.read_text() == "new"


def test_disk_full_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "r.txt"
    target.write_text("old report")
    out = OutputTarget(target)

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(ConfigError, match="disk is full.*unchanged"):
        out.write("new report")
    monkeypatch.undo()
    assert target.read_text() == "old report"
    assert _temps(tmp_path) == []


def test_pieces_are_written_as_they_come_and_a_failing_one_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old report")
    seen: list[int] = []

    def pieces():
        for i in range(3):
            seen.append(os.fstat(out._fd).st_size)  # what the temporary holds before piece i
            yield f"piece {i}\n" if i != 1 else f"piece {i}\n".encode()

    out = OutputTarget(target)
    out.write(pieces())
    assert target.read_text() == "piece 0\npiece 1\npiece 2\n" and seen == [0, 8, 16]

    def broken():
        yield "half a report"
        raise ValueError("formatter failed")

    with pytest.raises(ValueError, match="formatter failed"):
        OutputTarget(target).write(broken())
    assert target.read_text() == "piece 0\npiece 1\npiece 2\n" and _temps(tmp_path) == []


def test_disk_full_on_a_special_file_is_a_clear_error() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with pytest.raises(ConfigError, match="disk is full"):
        OutputTarget("/dev/full").write("x" * 10)


def test_an_error_during_the_work_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "r.txt"
    with pytest.raises(RuntimeError), OutputTarget(target):
        raise RuntimeError("scan failed")
    assert not target.exists() and _temps(tmp_path) == []


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path: Path) -> None:
    target = tmp_path / "r.txt"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".r.txt.{dead.stdout.strip()}.abcd.tmp"
    live = tmp_path / f".r.txt.{os.getpid()}.efgh.tmp"
    other = tmp_path / ".other.txt.1.abcd.tmp"
    for p in (stale, live, other):
        p.write_text("partial")
    assert remove_stale_temporaries(target) == [stale]
    write_atomic(target, "x")
    assert not stale.exists() and live.exists() and other.exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_removes_the_temporary(tmp_path: Path, signum: int) -> None:
    target = tmp_path / "r.txt"
    code = (
        "import sys, time\n"
        "from contrast_audit.io.atomic import OutputTarget\n"
        f"out = OutputTarget({str(target)!r})\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    assert len(_temps(tmp_path)) == 1
    proc.send_signal(signum)
    proc.wait(10)
    assert proc.returncode != 0
    deadline = time.monotonic() + 5
    while _temps(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _temps(tmp_path) == [] and not target.exists()


def test_check_output_dir(tmp_path: Path, data: Path) -> None:
    out = check_output_dir(tmp_path / "a" / "b")
    assert out.is_dir() and list(out.iterdir()) == []
    with pytest.raises(ConfigError, match="is a file"):
        check_output_dir(data)
    with pytest.raises(ConfigError, match="is empty"):
        check_output_dir("")
    with pytest.raises(ConfigError, match="cannot write"):
        check_output_dir("/proc/x")


class TestOutputsThatCouldHang:
    def test_fifo_without_reader_is_refused_before_the_work(self, tmp_path: Path, monkeypatch) -> None:
        from contrast_audit.io import atomic

        fifo = tmp_path / "out.fifo"
        os.mkfifo(fifo)
        monkeypatch.setattr(atomic, "FIFO_WAIT_S", 0.2)
        started = time.monotonic()
        with pytest.raises(ConfigError, match="no process read from within"):
            OutputTarget(fifo)
        assert time.monotonic() - started < 5

    def test_fifo_with_a_late_reader_gets_the_whole_report(self, tmp_path: Path) -> None:
        fifo = tmp_path / "out.fifo"
        os.mkfifo(fifo)
        got: list[str] = []
        reader = threading.Thread(target=lambda: (time.sleep(0.3), got.append(fifo.read_text())))
        reader.start()
        with OutputTarget(fifo) as out:
            out.write(["{", "}\n"])
        reader.join(5)
        assert got == ["{}\n"] and _temps(tmp_path) == []


class TestOutputNames:
    def test_a_long_name_that_fits_is_written(self, tmp_path: Path) -> None:
        target = tmp_path / ("r" * 240 + ".json")
        with OutputTarget(target) as out:
            out.write("{}\n")
        assert target.read_text() == "{}\n" and _temps(tmp_path) == []

    def test_stale_temporaries_of_a_long_name_are_removed(self, tmp_path: Path) -> None:
        target = tmp_path / ("r" * 240 + ".json")
        with OutputTarget(target):
            (stale,) = _temps(tmp_path)
        dead = stale.with_name(stale.name.replace(f".{os.getpid()}.", ".999999999."))
        dead.write_text("x")
        assert remove_stale_temporaries(target) == [dead]

    def test_a_name_too_long_blames_the_name(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError) as info:
            OutputTarget(tmp_path / ("r" * 300 + ".json"))
        message = info.value.render()
        assert "file name is 305 bytes long" in message and "shorter file name" in message
        assert "cannot write in" not in message

    @pytest.mark.parametrize(
        ("pid", "stale"),
        [
            ("²", False),  # isdigit() is True, int() refuses it: not a name of ours, left alone
            ("٣", False),  # an Arabic-Indic three: a decimal, but not ASCII
            ("", False),
            ("12345678901234567890", True),  # int() takes it, os.kill raised OverflowError: no process has it
            ("9" * 200, True),
            ("0", True),  # kill(0, 0) signals our own group: never a live owner
            ("-5", True),
            (str(atomic.PID_MAX + 1), True),
        ],
    )
    def test_temporaries_whose_pid_no_process_can_have(self, tmp_path: Path, pid: str, stale: bool) -> None:
        target = tmp_path / "r.json"
        leftover = tmp_path / f".r.json.{pid}.abcd1234.tmp"
        leftover.write_text("partial")
        with OutputTarget(target, option="--output") as out:  # removes stale temporaries first
            out.write("{}\n")
        assert target.read_text() == "{}\n"
        assert leftover.exists() is not stale

    def test_pid_alive_is_false_for_ids_no_process_can_have(self) -> None:
        assert atomic.pid_alive(os.getpid())
        for pid in (0, -1, -os.getpid(), atomic.PID_MAX + 1, 10**19, 10**30):
            assert not atomic.pid_alive(pid), pid
        texts = ("42", "007", "-3", "²", "٣", "+1", "4 2", "")
        assert [atomic.parse_pid(t) for t in texts] == [42, 7, -3, None, None, None, None, None]
        assert atomic.parse_pid("1" * 5000) == atomic.PID_MAX + 1  # never int() of 5,000 digits

    def test_a_symlink_loop_says_so(self, tmp_path: Path) -> None:
        (tmp_path / "loop").symlink_to(tmp_path / "loop")
        with pytest.raises(ConfigError, match="symbolic link that loops"):
            OutputTarget(tmp_path / "loop")


class TestIgnoredSignals:
    """A run started with SIGINT/SIGTERM ignored (``cmd &`` in a script) keeps them ignored: its report
    is written, not deleted by a handler."""

    def test_ignored_signals_stay_ignored(self, tmp_path: Path) -> None:
        target = tmp_path / "r.txt"
        code = (
            "import os, signal, sys, time\n"
            "from contrast_audit.io.atomic import OutputTarget\n"
            f"out = OutputTarget({str(target)!r})\n"
            "assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN\n"
            "assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n"
            "out.write('whole report\\n')\n"
        )

        def ignore() -> None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=ignore,  # noqa: PLW1509 - the state a shell gives a background job
        )
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == b"ready", proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        assert len(_temps(tmp_path)) == 1  # the temporary survived both signals
        proc.stdin.write(b"go\n")
        proc.stdin.close()
        assert proc.wait(10) == 0, proc.stderr.read() if proc.stderr else ""
        assert target.read_text() == "whole report\n" and _temps(tmp_path) == []


def test_ctrl_c_exits_130_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text(
        "".join(f'{{"anchor": "query {i} about {i % 97}", "positive": "answer {i}"}}\n' for i in range(40_000))
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-c", "from contrast_audit.cli import main; main()", "scan", "in.jsonl"]
    command += ["--no-embeddings", "-q", "--output", "r.json"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _temps(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if proc.poll() is not None:
        pytest.skip("the scan ended before it could be interrupted")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("contrast-audit: interrupted (Ctrl-C)")
    assert "Traceback" not in stderr and _temps(tmp_path) == [] and not (tmp_path / "r.json").exists()
