"""Peak RSS of writing the JSON report of a scan with many findings, in its own process.

    .venv/bin/python bench/scan_scale.py --rows 30000 --distinct-positives 40 --write-only /tmp/findings
    .venv/bin/python bench/report_memory.py dict /tmp/findings/pairs_30000.jsonl
    .venv/bin/python bench/report_memory.py stream /tmp/findings/pairs_30000.jsonl

``dict``: ``json.dumps`` of the whole report dict (how the report was written before); ``stream``:
the JSON formatter, which writes the row lists slice by slice. The peak is reset after the audit
(``/proc/self/clear_refs``), so ``report_peak_mib`` is the high-water mark of writing the report.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stage_profile import _peak_mib, _reset_peak  # noqa: E402

from contrast_audit.api import audit  # noqa: E402
from contrast_audit.config import build_config  # noqa: E402


def main() -> None:
    mode, data = sys.argv[1], sys.argv[2]
    if mode not in ("dict", "stream"):
        raise SystemExit("usage: report_memory.py dict|stream PAIRS.jsonl")
    result = audit([data], build_config({"embeddings": False, "batch_size": 64}))
    audit_peak = _peak_mib()
    _reset_peak()
    start = time.process_time()
    if mode == "dict":
        text = json.dumps(result.report(), indent=2, ensure_ascii=False) + "\n"
    else:
        from contrast_audit.report.json_format import render

        text = render(result)
    out = {
        "mode": mode,
        "findings": result.findings.height,
        "audit_peak_mib": round(audit_peak),
        "report_peak_mib": round(_peak_mib()),
        "report_cpu_s": round(time.process_time() - start, 2),
        "bytes": len(text.encode()),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
