"""Peak RSS of writing the JSON (or SARIF) report of a scan with many findings, in its own process.

    .venv/bin/python bench/scan_scale.py --rows 30000 --distinct-positives 40 --write-only /tmp/findings
    .venv/bin/python bench/report_memory.py dict /tmp/findings/pairs_30000.jsonl
    .venv/bin/python bench/report_memory.py text /tmp/findings/pairs_30000.jsonl
    .venv/bin/python bench/report_memory.py stream /tmp/findings/pairs_30000.jsonl
    .venv/bin/python bench/report_memory.py stream /tmp/findings/pairs_30000.jsonl --format sarif

Each mode writes the report to a file through the CLI's atomic ``OutputTarget``. ``dict``: ``json.dumps``
of the whole report dict (how the JSON report was first written); ``text``: the formatter's whole text
as one string (how it was written before pieces); ``stream``: the pieces, written as they are made (what
``scan --output`` does now). The peak is reset after the audit (``/proc/self/clear_refs``), so
``report_peak_mib`` is the high-water mark of writing the report.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stage_profile import _peak_mib, _reset_peak  # noqa: E402

from contrast_audit.api import audit  # noqa: E402
from contrast_audit.config import build_config  # noqa: E402
from contrast_audit.io.atomic import OutputTarget  # noqa: E402
from contrast_audit.report import FORMATTERS, pieces  # noqa: E402
from contrast_audit.report.sarif import sarif_log  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["dict", "text", "stream"])
    parser.add_argument("data")
    parser.add_argument("--format", choices=["json", "sarif"], default="json")
    args = parser.parse_args()
    result = audit([args.data], build_config({"embeddings": False, "batch_size": 64}))
    audit_peak = _peak_mib()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"report.{args.format}"
        target = OutputTarget(path)
        _reset_peak()
        start = time.process_time()
        if args.mode == "dict":
            whole = result.report() if args.format == "json" else sarif_log(result)
            target.write(json.dumps(whole, indent=2, ensure_ascii=False) + "\n")
        elif args.mode == "text":
            target.write(FORMATTERS[args.format](result))
        else:
            target.write(pieces(args.format, result))
        out = {
            "mode": args.mode,
            "format": args.format,
            "findings": result.findings.height,
            "audit_peak_mib": round(audit_peak),
            "report_peak_mib": round(_peak_mib()),
            "report_cpu_s": round(time.process_time() - start, 2),
            "bytes": path.stat().st_size,
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
