"""bench/engines.py: the engine comparison on a tiny synthetic file, the report comparison, and the
process-tree measurement (CPU of processes the kernel reaps for a parent that ignores SIGCHLD, as
Ray's raylet does for its workers)."""

from __future__ import annotations

import json
import sys

from bench import engines

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8:\n    pass\n"


def test_memory_and_stream_give_identical_reports(tmp_path, capsys):
    argv = ["--rows", "300", "--distinct-positives", "50", "--batch-size", "32"]
    code = engines.main([*argv, "--engines", "memory", "stream", "--work", str(tmp_path)])
    assert code == 0
    runs = json.loads((tmp_path / "engines.json").read_text())["runs"]
    assert [r["engine"] for r in runs] == ["memory", "stream"]
    memory, stream = runs
    assert stream["identical"] is True and stream["first_difference"] is None and stream["other_difference"] is None
    assert memory["findings"] == stream["findings"] > 0 and memory["rows"] == 300
    for r in runs:
        assert r["wall_s"] > 0 and r["cpu_s"] > 0 and r["driver_peak_mib"] > 0 and r["tree_peak_mib"] > 0
        assert r["cpu_auto_reaped_sampled_s"] == 0 and r["left_running"] == 0 and r["subreaper"]
    table = (tmp_path / "engines.md").read_text()
    rows = {line.split(" | ")[2]: line for line in table.splitlines() if line.startswith("| synthetic 300")}
    found = f"| {memory['findings']:,} |"
    assert rows["memory"].endswith(f"{found} reference |") and rows["stream"].endswith(f"{found} yes |")
    assert table in capsys.readouterr().out


def test_a_failed_scan_exits_2_with_its_stderr(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"anchor": "a"}\n')
    assert engines.main(["--data", str(bad), "--engines", "memory", "--work", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl, engine memory: scan exited 2" in err and "positive" in err


def test_compare_names_the_first_difference_and_ignores_the_allowed_ones():
    base = {
        "config": {"engine": "memory", "seed": 1},
        "detectors": {"minhash": {"candidate_checks": 4, "near_duplicate_pairs": 1, "skipped_buckets": 0}},
        "input": {"rows": 2, "row_hashes": ["a", "b"]},
        "counts": {"findings": 1},
        "findings": [{"anchor_row": 0, "evidence": [{"kind": "exact", "score": 1.0}]}],
        "mislabelled_negatives": [],
    }
    allowed = json.loads(json.dumps(base))
    allowed["config"]["engine"] = "stream"
    allowed["detectors"]["minhash"] = dict.fromkeys(("candidate_checks", "near_duplicate_pairs", "skipped_buckets"))
    assert engines.compare(base, allowed) == (None, None)

    other = json.loads(json.dumps(base))
    other["findings"][0]["evidence"][0]["score"] = 0.5
    assert engines.compare(base, other) == ("findings[0].evidence[0].score: 1.0 != 0.5", None)
    other = json.loads(json.dumps(base))
    other["input"]["row_hashes"].append("c")
    assert engines.compare(base, other)[0] == "input.row_hashes: 2 items != 3 items"
    other = json.loads(json.dumps(base))
    other["config"]["seed"] = 2
    assert engines.compare(base, other) == (None, "config.seed: 1 != 2")


def test_measure_counts_a_child_the_kernel_reaps(tmp_path):
    # the parent ignores SIGCHLD, so its child's CPU reaches no rusage: only the /proc samples see it
    parent = (
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
        f"p = subprocess.Popen([sys.executable, '-c', {BURN!r}])\n"
        "while True:\n"
        "    try:\n"
        "        os.kill(p.pid, 0)\n"
        "    except ProcessLookupError:\n"
        "        break\n"
        "    time.sleep(0.05)\n"
    )
    m = engines.measure([sys.executable, "-c", parent], tmp_path / "m.json", tmp_path / "err")
    assert m["exit_code"] == 0 and m["processes_seen"] == 2 and m["auto_reaped_processes"] == 1
    assert 0.5 <= m["cpu_auto_reaped_sampled_s"] <= 1.2  # 0.8 s burnt, less at most one sampling interval
    assert m["driver_cpu_s"] < 0.5 and m["cpu_s"] >= m["driver_cpu_s"] + m["cpu_auto_reaped_sampled_s"]
