"""Scan engines side by side: memory, stream and ray on the same inputs — time, CPU, memory, identity.

    .venv/bin/python -m bench.engines --rows 100000 1000000 --work /tmp/ca-engines
    .venv/bin/python -m bench.engines --data pairs.jsonl --engines memory stream --work /tmp/ca-engines
    .venv/bin/python -m bench.engines --quality-data /work/shared/data --engines memory stream --work /tmp/ca-engines
    .venv/bin/python -m bench.engines --rows 10000000 --engines stream --max-memory 4GiB --work /tmp/ca-engines
    .venv/bin/python -m bench.engines --sentence-rows 1000000 --sentence-data /work/shared/data --embeddings \
        --engines stream --max-memory 4GiB --work /tmp/ca-engines

Run from the repository root. Inputs: pair files (``--data``); synthetic files of N rows (``--rows``,
written into WORK by ``bench.scan_scale.write_pairs`` once and kept for later runs); files of N rows of
real sentences (``--sentence-rows``, ``bench.scan_scale.write_sentence_pairs`` from ``--sentence-data``,
kept the same way: prose for embedding evidence, whose first stage reads templated text as all alike);
the detection-quality
cases (``--quality-data``, built into WORK/quality by bench.quality's case builders, each scanned with its
``--plan WORK/quality/CASE/plan.jsonl`` and no ``--batch-size``, as bench/quality/run.py scans it). Each
input is scanned once per engine (``--engines``, default memory stream ray; the memory engine first):

    contrast-audit scan FILE --no-embeddings [--batch-size B | --plan PLAN] --format json
        --output WORK/reports/INPUT.ENGINE.json --quiet --engine ENGINE [--max-memory M] [SCAN-ARGS]

(``--embeddings`` leaves ``--no-embeddings`` out; pass ``--scan-args "--cache-dir DIR"`` for a cache of the
run's own.)

Measured per scan, by a small runner process that starts the scan as its only child, makes itself
the child subreaper (prctl PR_SET_CHILD_SUBREAPER: the scan's orphans are re-parented to it, not to
init) and reaps everything the scan leaves behind:

- wall s: from starting the scan to its exit;
- CPU s (tree): user + system of the driver and every process it started. Two parts, both in
  engines.json: (a) exact, the runner's ``RUSAGE_CHILDREN`` once every descendant is reaped — the
  driver, and what the driver and the runner reaped (Ray's GCS, raylet, agents, any orphan);
  (b) sampled, the processes whose parent ignores SIGCHLD when last seen: Ray's raylet does, so its
  worker processes are reaped by the kernel and their CPU reaches no one's rusage; each such process
  counts with its utime+stime+cutime+cstime as last read from /proc/PID/stat (every 0.2 s), a lower
  bound that misses each worker's last 0.2 s at most. Under memory and stream (b) is 0;
- driver CPU s: the driver's own user + system, read from its zombie before it is reaped (its
  children's time, e.g. Ray's GCS and raylet under ray, is not in it);
- driver peak MiB: ``wait4``'s peak RSS of the driver, which is the driver's own unless a process it
  reaped itself peaked higher (under ray: GCS, raylet; engines.json also has the driver's VmHWM as last
  sampled);
- tree peak MiB: the largest sum, over the driver and its descendants, of each process's PSS
  (``/proc/PID/smaps_rollup``; RSS where that is unreadable), sampled every 0.2 s. PSS splits a shared
  page (Ray's object store, the libraries every Ray worker maps) among the processes that map it
  rather than counting it once per process; a process outside the tree that maps the same library
  files (another Python of this virtual environment) takes its share too, so with one process the
  figure can read below the driver's peak RSS, as it can when a peak shorter than 0.2 s falls between
  two samples. engines.json has the RSS sum too.

Only this machine's processes are measured: with ``--scan-args "--ray-address HOST:PORT"`` the work done
on the cluster's nodes is in none of the figures.

Each engine's report is compared with the memory engine's report of the same input: ``findings``,
``mislabelled_negatives``, ``counts`` and ``input.row_hashes`` must be equal ("identical"; the first
difference is printed when not). The rest of the report is compared too, less the differences the
engines are allowed (``config.engine`` and ``detectors.minhash.{candidate_checks,near_duplicate_pairs,
skipped_buckets}``), and any other difference is listed under the table. The table is printed and
written to WORK/engines.md, the numbers to WORK/engines.json. Exit 0, or 2 when a case cannot be
built or a scan fails (exit code other than 0 or 1, the gate's).
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Standard library only: the measuring runner imports this module, and pages of numpy or polars mapped
# there would take a share of the scan's PSS. bench.scan_scale (numpy) and contrast_audit (polars) are
# imported where they are used.
from bench.quality.cases import CASE_BATCH_SIZE, CASES, DEFAULT_BATCH_SIZE, DEFAULT_SEED, write_atomic

ENGINES = ("memory", "stream", "ray", "auto")
REFERENCE = "memory"
COMPARED = ("findings", "mislabelled_negatives", "counts", "input.row_hashes")
ALLOWED = (
    "config.engine",
    *(f"detectors.minhash.{k}" for k in ("candidate_checks", "near_duplicate_pairs", "skipped_buckets")),
    # Cache lookups: a streamed audit looks a text up in every run that holds it, and for the calibrations.
    *(
        f"detectors.{d}.{k}"
        for d in ("embedding", "anchor-embedding", "minhash")
        for k in ("embedded", "cached", "token_texts_encoded", "token_texts_cached")
    ),
)
SCAN_OK = (0, 1)  # 1 = the gate failed, still a complete report
SAMPLE_SECONDS = 0.2
REAP_GRACE_SECONDS = 20.0  # how long the runner waits for processes that outlive the driver
PR_SET_CHILD_SUBREAPER = 36
MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]


class BenchError(Exception):
    """An input could not be built or a scan failed; the message says which and why."""


# --------------------------------------------------------------------------- measuring a process tree


@dataclass
class Seen:
    """One process of the tree as last sampled."""

    ticks: int  # utime + stime + cutime + cstime: its CPU and that of the children it reaped
    hwm: int  # VmHWM, bytes
    auto_reaped: bool  # its parent ignores SIGCHLD: no rusage of it reaches anyone when it exits


class TreeSampler(threading.Thread):
    """Every ``interval`` seconds: the descendants of ``root`` (by /proc ppid links), the sums of their
    PSS (RSS where smaps_rollup is unreadable) and RSS, and each process as last seen."""

    def __init__(self, root: int, interval: float = SAMPLE_SECONDS) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.interval = interval
        self.peak_pss = 0  # bytes
        self.peak_rss = 0
        self.pss_fallbacks = 0  # samples of a process whose PSS could not be read (counted by its RSS)
        self.seen: dict[tuple[int, int], Seen] = {}  # (pid, start time) → last sample
        self._done = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")

    def run(self) -> None:
        while not self._done.is_set():
            self.sample()
            self._done.wait(self.interval)

    def stop(self) -> None:
        self._done.set()
        self.join()

    def sample(self) -> None:
        stats: dict[int, list[str]] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and (fields := _stat(int(entry.name))):
                stats[int(entry.name)] = fields
        children: dict[int, list[int]] = {}
        for pid, fields in stats.items():
            children.setdefault(int(fields[1]), []).append(pid)
        tree, todo = [], list(children.get(self.root, []))
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += children.get(pid, [])
        ignores: dict[int, bool] = {}
        pss = rss = 0
        for pid in tree:
            # fields[0] is the state, field 3 of proc(5): ppid 4, utime..cstime 14-17, starttime 22, rss 24
            fields = stats[pid]
            ppid = int(fields[1])
            if ppid not in ignores:
                ignores[ppid] = _ignores_sigchld(ppid)
            status = _status(pid)
            self.seen[(pid, int(fields[19]))] = Seen(
                ticks=sum(int(f) for f in fields[11:15]),
                hwm=status.get("VmHWM", 0),
                auto_reaped=ignores[ppid],
            )
            proc_rss = int(fields[21]) * self._page
            rss += proc_rss
            proc_pss = _pss(pid)
            if proc_pss is None:
                self.pss_fallbacks += 1
                proc_pss = proc_rss
            pss += proc_pss
        self.peak_pss = max(self.peak_pss, pss)
        self.peak_rss = max(self.peak_rss, rss)


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat from field 3 (the state) on, or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _status(pid: int) -> dict[str, int]:
    """The numeric fields of /proc/PID/status (kB fields in bytes; SigIgn as a number)."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            parts = value.split()
            if key == "SigIgn":
                out[key] = int(parts[0], 16)
            elif len(parts) == 2 and parts[1] == "kB":
                out[key] = int(parts[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def _ignores_sigchld(pid: int) -> bool:
    return bool(_status(pid).get("SigIgn", 0) >> (signal.SIGCHLD - 1) & 1)


def _pss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _become_subreaper() -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def measure_tree(cmd: list[str], stderr_path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` as this process's only child and measure it and all its descendants (see the module
    docstring). Call it in a process of its own (``measure``): it reaps every child it has."""
    subreaper = _become_subreaper()
    tick = os.sysconf("SC_CLK_TCK")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with stderr_path.open("wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
    sampler = TreeSampler(os.getpid())
    sampler.start()
    # wait without reaping: the zombie's stat still holds its own CPU time apart from its children's
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    wall = time.perf_counter() - start
    fields = _stat(proc.pid) or []
    driver_ticks = int(fields[11]) + int(fields[12]) if fields else None
    _, status, driver = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    orphans, left_running = _reap_all(REAP_GRACE_SECONDS)
    sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # a process last seen under a parent that ignores SIGCHLD, unless it was orphaned and reaped here after all
    unreaped = sum(s.ticks for (pid, _), s in sampler.seen.items() if s.auto_reaped and pid not in orphans) / tick
    driver_seen = [s for (pid, _), s in sampler.seen.items() if pid == proc.pid]
    return {
        "exit_code": proc.returncode,
        "wall_s": wall,
        "cpu_s": reaped + unreaped,
        "cpu_reaped_s": reaped,
        "cpu_auto_reaped_sampled_s": unreaped,
        "driver_cpu_s": driver_ticks / tick if driver_ticks is not None else driver.ru_utime + driver.ru_stime,
        "driver_peak_mib": driver.ru_maxrss * 1024 / MIB,
        "driver_hwm_sampled_mib": max((s.hwm for s in driver_seen), default=0) / MIB,
        "tree_peak_mib": sampler.peak_pss / MIB,
        "tree_peak_rss_mib": sampler.peak_rss / MIB,
        "tree_pss_fallbacks": sampler.pss_fallbacks,
        "processes_seen": len(sampler.seen),
        "auto_reaped_processes": sum(s.auto_reaped for s in sampler.seen.values()),
        "subreaper": subreaper,
        "left_running": left_running,
    }


def _reap_all(grace: float) -> tuple[set[int], int]:
    """Reap every child (the scan's orphans end up here): the pids reaped, and how many children still
    ran after ``grace`` seconds."""
    reaped: set[int] = set()
    deadline = time.monotonic() + grace
    while True:
        try:
            pid, _, _ = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped, 0
        if pid:
            reaped.add(pid)
        elif time.monotonic() > deadline:
            me = os.getpid()
            return reaped, sum(1 for entry in os.scandir("/proc") if entry.name.isdigit() and _ppid(entry.name) == me)
        else:
            time.sleep(0.05)


def _ppid(pid: str) -> int | None:
    fields = _stat(int(pid))
    return int(fields[1]) if fields else None


def _runner(argv: list[str]) -> int:
    """Entry point of the runner process: RESULT.json STDERR -- CMD..."""
    result, stderr, _, *cmd = argv
    write_atomic(Path(result), json.dumps(measure_tree(cmd, Path(stderr))))
    return 0


def measure(cmd: list[str], result_path: Path, stderr_path: Path) -> dict[str, Any]:
    """``measure_tree`` in a runner process of its own, so that reaping every child touches no one else's."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    code = "import sys; from bench.engines import _runner; sys.exit(_runner(sys.argv[1:]))"
    result_path.unlink(missing_ok=True)
    runner = subprocess.run(
        [sys.executable, "-c", code, str(result_path), str(stderr_path), "--", *cmd],
        env=env,
        capture_output=True,
        text=True,
    )
    if runner.returncode != 0 or not result_path.is_file():
        raise BenchError(f"the measuring runner failed (exit {runner.returncode}):\n{runner.stderr.strip()[-2000:]}")
    return json.loads(result_path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- comparing reports


def _get(report: dict, dotted: str) -> Any:
    value: Any = report
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _drop(report: dict, dotted: str) -> None:
    *parents, last = dotted.split(".")
    node: Any = report
    for key in parents:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where ``a`` and ``b`` first differ (``findings[3].evidence[0].score: 0.71 != 0.72``), or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                return (
                    f"{where}: {'missing' if key not in a else 'present'} != {'missing' if key not in b else 'present'}"
                )
            found = first_difference(a[key], b[key], where)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None if len(a) == len(b) else f"{path}: {len(a)} items != {len(b)} items"
    if type(a) is not type(b) or a != b:
        return f"{path}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"
    return None


def compare(reference: dict, other: dict) -> tuple[str | None, str | None]:
    """The first difference in the compared parts (``COMPARED``), and the first elsewhere in the report
    less the allowed differences (``ALLOWED``)."""
    for part in COMPARED:
        found = first_difference(_get(reference, part), _get(other, part), part)
        if found:
            return found, None
    rest = [copy.deepcopy(reference), copy.deepcopy(other)]
    for report in rest:
        for part in (*COMPARED, *ALLOWED):
            _drop(report, part)
    return None, first_difference(*rest)


# --------------------------------------------------------------------------- inputs and runs


@dataclass
class Input:
    name: str
    path: Path
    plan: Path | None = None  # a quality case's plan: scanned with --plan instead of --batch-size


@dataclass
class Run:
    input: str
    rows: int
    engine: str
    command: list[str]
    findings: int
    identical: bool | None  # None: the memory engine itself, or no memory-engine report to compare with
    first_difference: str | None
    other_difference: str | None
    exit_code: int
    wall_s: float
    cpu_s: float
    driver_cpu_s: float
    driver_peak_mib: float
    tree_peak_mib: float
    cpu_reaped_s: float
    cpu_auto_reaped_sampled_s: float
    driver_hwm_sampled_mib: float
    tree_peak_rss_mib: float
    tree_pss_fallbacks: int
    processes_seen: int
    auto_reaped_processes: int
    left_running: int
    subreaper: bool


MEASURED = (
    "exit_code",
    "wall_s",
    "cpu_s",
    "driver_cpu_s",
    "driver_peak_mib",
    "tree_peak_mib",
    "cpu_reaped_s",
    "cpu_auto_reaped_sampled_s",
    "driver_hwm_sampled_mib",
    "tree_peak_rss_mib",
    "tree_pss_fallbacks",
    "processes_seen",
    "auto_reaped_processes",
    "left_running",
    "subreaper",
)  # what ``measure_tree`` returns, Run's fields from it


def build_inputs(args: argparse.Namespace, work: Path) -> list[Input]:
    from bench.scan_scale import write_pairs, write_sentence_pairs

    inputs: list[Input] = []
    names: set[str] = set()

    def add(name: str, path: Path, plan: Path | None = None) -> None:
        unique, i = name, 2
        while unique in names:
            unique, i = f"{name}#{i}", i + 1
        names.add(unique)
        inputs.append(Input(unique, path, plan))

    for path in args.data:
        if not path.is_file():
            raise BenchError(f"{path}: no such file — pass a pair file to --data")
        add(path.name, path)
    for n in args.sentence_rows:
        if args.sentence_data is None:
            raise BenchError("--sentence-rows needs --sentence-data DIR (the shared data sets)")
        path = work / f"sentences_{n}.jsonl"
        if not path.is_file():
            partial = path.with_name(f".{path.name}.partial")
            write_sentence_pairs(partial, n, args.sentence_data)
            partial.replace(path)
        add(f"sentences {n:,}", path)
    for n in args.rows:
        k = args.distinct_positives
        path = work / (f"pairs_{n}_positives_{k}.jsonl" if k else f"pairs_{n}.jsonl")
        if not path.is_file():  # written once per size and kept: a large one takes a while
            partial = path.with_name(f".{path.name}.partial")
            write_pairs(partial, n, distinct_positives=k)
            partial.replace(path)
        add(f"synthetic {n:,}" + (f" ({k} positives)" if k else ""), path)
    if args.quality_data:
        for name in args.cases:
            try:
                case = CASES[name](
                    args.quality_data,
                    work / "quality" / name,
                    batch_size=CASE_BATCH_SIZE.get(name, DEFAULT_BATCH_SIZE),
                    seed=DEFAULT_SEED,
                    part="all",
                )
            except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
                raise BenchError(f"quality case {name}: cannot build it from {args.quality_data}: {exc}") from exc
            add(f"quality/{name}", case.path / "pairs.jsonl", case.path / "plan.jsonl")
    if not inputs:
        raise BenchError("no input: pass --data FILE, --rows N, --sentence-rows N or --quality-data DIR")
    return inputs


def scan_command(args: argparse.Namespace, item: Input, engine: str, out: Path) -> list[str]:
    exe = str(Path(sys.executable).with_name("contrast-audit"))
    batches = ["--plan", str(item.plan)] if item.plan else ["--batch-size", str(args.batch_size)]
    memory = ["--max-memory", args.max_memory] if args.max_memory else []
    return [
        exe,
        "scan",
        str(item.path),
        *([] if args.embeddings else ["--no-embeddings"]),
        *batches,
        "--format",
        "json",
        "--output",
        str(out),
        "--quiet",
        "--engine",
        engine,
        *memory,
        *shlex.split(args.scan_args),
    ]


def run_input(args: argparse.Namespace, item: Input, reports: Path) -> list[Run]:
    runs: list[Run] = []
    reference: dict | None = None
    # the memory engine first: every other engine's report is compared with it
    for engine in sorted(args.engines, key=lambda e: e != REFERENCE):
        stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in item.name)
        out = reports / f"{stem}.{engine}.json"
        err = reports / f"{stem}.{engine}.stderr"
        out.unlink(missing_ok=True)
        cmd = scan_command(args, item, engine, out)
        print(f"$ {shlex.join(cmd)}", file=sys.stderr, flush=True)
        m = measure(cmd, reports / f".{stem}.{engine}.measure.json", err)
        if m["exit_code"] not in SCAN_OK or not out.is_file():
            tail = err.read_text(encoding="utf-8", errors="replace").strip()[-2000:]
            raise BenchError(f"{item.name}, engine {engine}: scan exited {m['exit_code']} ({shlex.join(cmd)}):\n{tail}")
        report = json.loads(out.read_text(encoding="utf-8"))
        if engine == REFERENCE:
            reference = report
        diff, other = compare(reference, report) if reference is not None else (None, None)
        runs.append(
            Run(
                input=item.name,
                rows=int(report["counts"]["rows"]),
                engine=engine,
                command=cmd,
                findings=int(report["counts"]["findings"]),
                identical=None if reference is None or engine == REFERENCE else diff is None,
                first_difference=diff,
                other_difference=other,
                **{k: m[k] for k in MEASURED},
            )
        )
    return runs


# --------------------------------------------------------------------------- output


def render(runs: list[Run], command: str, cpus: int) -> str:
    out = [f"`{command}` ({cpus} usable CPUs)\n\n"]
    out.append(
        "| input | rows | engine | wall s | CPU s (tree) | driver CPU s | driver peak MiB | tree peak MiB (PSS) "
        "| findings | identical |\n"
    )
    out.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---|\n")
    for r in runs:
        same = "reference" if r.engine == REFERENCE else "—" if r.identical is None else "yes" if r.identical else "no"
        cpu = f"{r.cpu_s:.1f}" + (f" ({r.cpu_auto_reaped_sampled_s:.1f} sampled)" if r.auto_reaped_processes else "")
        out.append(
            f"| {r.input} | {r.rows:,} | {r.engine} | {r.wall_s:.1f} | {cpu} | {r.driver_cpu_s:.1f} "
            f"| {r.driver_peak_mib:.0f} | {r.tree_peak_mib:.0f} | {r.findings:,} | {same} |\n"
        )
    out.append(
        "\nCPU s (tree): user + system of the scan and every process it started, exact from rusage except "
        "for processes whose parent ignores SIGCHLD (Ray's workers, under the raylet): those are sampled from "
        f"/proc every {SAMPLE_SECONDS} s, a lower bound (the part in brackets). Driver CPU s: the driver's own. "
        "Driver peak: wait4's peak RSS. Tree peak: the largest sum of the tree's PSS, sampled every "
        f"{SAMPLE_SECONDS} s. Identical: {', '.join(COMPARED)} equal to the memory engine's report "
        "(— without one). bench/engines.py says more.\n"
    )
    notes = []
    for r in runs:
        where = f"{r.input}, {r.engine}"
        if r.first_difference:
            notes.append(f"- {where}: first difference: {r.first_difference}")
        if r.other_difference:
            notes.append(
                f"- {where}: the report differs elsewhere, beyond the allowed differences: {r.other_difference}"
            )
        if r.left_running:
            notes.append(
                f"- {where}: {r.left_running} processes still ran {REAP_GRACE_SECONDS:.0f} s after the scan "
                "exited; their CPU time is not counted"
            )
        if not r.subreaper:
            notes.append(f"- {where}: could not become the child subreaper: orphaned processes' CPU is not counted")
    if notes:
        out.append("\n" + "\n".join(notes) + "\n")
    return "".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.engines", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--data", type=Path, nargs="+", default=[], help="pair files to scan")
    parser.add_argument("--rows", type=int, nargs="+", default=[], help="synthetic files of these sizes")
    parser.add_argument(
        "--distinct-positives", type=int, default=0, help="synthetic files: draw every positive from this many texts"
    )
    parser.add_argument(
        "--sentence-rows",
        type=int,
        nargs="+",
        default=[],
        help="files of real sentences of these sizes (needs --sentence-data)",
    )
    parser.add_argument("--sentence-data", type=Path, help="the shared data sets, for --sentence-rows")
    parser.add_argument("--embeddings", action="store_true", help="scan with embedding evidence (no --no-embeddings)")
    parser.add_argument("--quality-data", type=Path, help="the shared data sets (bench/quality's --data)")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), help="quality cases")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=["memory", "stream", "ray"])
    parser.add_argument("--batch-size", type=int, default=64, help="for --data and --rows (a case has its plan)")
    parser.add_argument("--max-memory", default=None, help="passed to every scan, e.g. 4GiB")
    parser.add_argument(
        "--scan-args", default="", help='extra scan flags, one string: --scan-args "--ray-address auto" (or =...)'
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/ca-engines"), help="inputs, reports and results")
    args = parser.parse_args(argv)
    if len(set(args.engines)) != len(args.engines):
        parser.error("--engines: name each engine once")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd() + os.sep) else sys.executable
    command = shlex.join([python, "-m", "bench.engines", *(sys.argv[1:] if argv is None else argv)])
    work = args.work
    reports = work / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    runs: list[Run] = []
    try:
        for item in build_inputs(args, work):
            runs += run_input(args, item, reports)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from contrast_audit.resources import usable_cpus

    cpus = usable_cpus()
    text = render(runs, command, cpus)
    write_atomic(work / "engines.md", text)
    write_atomic(
        work / "engines.json",
        json.dumps({"command": command, "cpus": cpus, "runs": [asdict(r) for r in runs]}, indent=2) + "\n",
    )
    print(text)
    print(f"written to {work / 'engines.md'} and {work / 'engines.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
