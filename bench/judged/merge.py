"""Append judged pairs to ``bench/judged/judgments.jsonl``.

    python -m bench.judged.merge WORK/to_judge.jsonl LABELS.jsonl [LABELS.jsonl ...]

``to_judge.jsonl`` is what ``sample.py`` drew (texts, data set, how each pair was drawn); each LABELS
file has one ``{"key", "label", "reason"}`` line per pair a person read. Pairs with a label are appended
(a key already judged is left as it is); pairs without one are counted and left out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.judged.common import JUDGMENTS, LABELS, read_judgments


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    drawn = [json.loads(line) for line in Path(args[0]).read_text(encoding="utf-8").splitlines() if line.strip()]
    labels: dict[str, dict] = {}
    for path in args[1:]:
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                record = json.loads(line)
                if record.get("label") not in LABELS or not str(record.get("reason", "")).strip():
                    raise SystemExit(f"{path}:{number}: needs a label ({', '.join(LABELS)}) and a reason")
                labels[record["key"]] = record
    judged = read_judgments()
    new = []
    for record in drawn:
        key = record["key"]
        if key in judged or key not in labels:
            continue
        new.append({**record, "label": labels[key]["label"], "reason": labels[key]["reason"].strip()})
        judged[key] = new[-1]
    with JUDGMENTS.open("a", encoding="utf-8") as out:
        out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in new)
    print(
        f"{len(new)} judgments appended to {JUDGMENTS}; {sum(1 for r in drawn if r['key'] not in labels)} left unjudged"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
