"""Write the sample developer-support pair set (pairs.jsonl) and what is planted in it (truth.json).

Deterministic and standard-library only: `python3 sample_data/generate.py` rewrites both files.
Clean rows come from clean_rows.json (distinct support topics: no row's answer answers another
row's question); planted rows hold the false-negative mechanisms described in docs/sample-data.md.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = ("docs", "forum", "tickets", "catalog")
COHORTS = ("2025-q3", "2025-q4", "2026-q1")


def clean_rows(rng: random.Random) -> list[dict]:
    """One row per entry of clean_rows.json: 320 distinct support topics, a third with a real hard
    negative (a nearby task with another intent)."""
    entries = json.loads((HERE / "clean_rows.json").read_text(encoding="utf-8"))
    rows = []
    for i, entry in enumerate(entries):
        row = {
            "id": f"clean-{i:04d}",
            "anchor": entry["question"],
            "positive": entry["answer"],
            "source": rng.choice(SOURCES[:3]),
            "cohort": rng.choice(COHORTS),
        }
        if entry.get("negative"):
            row["negative"] = entry["negative"]
        rows.append(row)
    return rows


def planted_rows() -> tuple[list[dict], list[dict]]:
    rows: list[dict] = []
    cases: list[dict] = []

    def add(rid: str, anchor: str, positive: str, source: str, cohort: str, **extra: str) -> None:
        rows.append({"id": rid, "anchor": anchor, "positive": positive, "source": source, "cohort": cohort, **extra})

    # 1. One query, several valid documents (same anchor text in different rows).
    multi = [
        (
            "pw",
            "How do I reset a forgotten password?",
            [
                "Use the Forgot password link on the sign-in page; a reset email arrives within five minutes.",
                "Account recovery: if you cannot remember your password, request a reset link from the login screen.",
                "Admins can force a password reset for any member from the Members page.",
            ],
        ),
        (
            "mfa",
            "Lost my phone, how do I get back into my account with 2FA on?",
            [
                "Sign in with one of the recovery codes you saved when you enabled two-factor authentication.",
                "If you have no recovery codes, contact support with your account email to verify your identity.",
            ],
        ),
        (
            "refund",
            "Can I get a refund for an annual plan?",
            [
                "Annual plans are refundable pro rata within 30 days of purchase.",
                "Refund requests go through Billing → Plan → Request refund; approval takes two business days.",
                "Unused seats on annual plans are credited to your next invoice instead of refunded.",
            ],
        ),
    ]
    for key, query, docs in multi:
        ids = [f"multi-{key}-{i}" for i in range(len(docs))]
        for rid, doc in zip(ids, docs, strict=True):
            add(rid, query, doc, "forum", "2025-q4")
        cases.append(
            {
                "name": f"multi-answer/{key}",
                "mechanism": "one query with several valid documents",
                "kind": "same-anchor",
                "severity": "certain",
                "pairs": [[a, b] for a in ids for b in ids if a != b],
            }
        )

    # 2. Repeated captions: the same document text answers different queries.
    captions = [
        (
            "keys",
            "Screenshot: the API keys page with the Rotate button highlighted.",
            [
                "where is the rotate key button",
                "API key rotation screen",
                "how to find key rotation in settings",
            ],
        ),
        (
            "export",
            "Screenshot: the Export dialog with CSV selected and the date filter open.",
            [
                "export dialog csv option",
                "how to pick a date range when exporting",
            ],
        ),
    ]
    for key, caption, queries in captions:
        ids = [f"caption-{key}-{i}" for i in range(len(queries))]
        for rid, query in zip(ids, queries, strict=True):
            add(rid, query, caption, "docs", "2026-q1")
        cases.append(
            {
                "name": f"repeated-caption/{key}",
                "mechanism": "captions repeated across rows",
                "kind": "exact",
                "severity": "certain",
                "pairs": [[a, b] for a in ids for b in ids if a != b],
            }
        )

    # 3. Near-duplicate product entries that differ only in case, spacing and punctuation.
    products = [
        (
            "cable",
            "usb-c cable 2m",
            "ACME USB-C Cable, 2 m, braided nylon, 100 W",
            "usb c charging cable two metre",
            "Acme usb-c cable, 2 m,  braided nylon, 100 W.",
        ),
        (
            "dock",
            "thunderbolt dock",
            "Acme Thunderbolt 4 Dock – 11 ports, 96 W charging",
            "laptop docking station tb4",
            '"Acme Thunderbolt 4 Dock – 11 ports, 96 W charging"',
        ),
        (
            "hub",
            "4 port usb hub",
            "Acme 4-Port USB 3.0 Hub with individual power switches",
            "usb 3 hub with switches",
            "acme 4-port usb 3.0 hub with individual power switches!",
        ),
    ]
    for key, q1, d1, q2, d2 in products:
        a, b = f"product-{key}-a", f"product-{key}-b"
        add(a, q1, d1, "catalog", "2025-q3")
        add(b, q2, d2, "catalog", "2026-q1")
        cases.append(
            {
                "name": f"near-duplicate-product/{key}",
                "mechanism": "near-duplicate product entries (normalised identical)",
                "kind": "exact",
                "severity": "certain",
                "pairs": [[a, b], [b, a]],
            }
        )

    # 4. Hard negatives that are really positives (mislabelled negatives).
    add(
        "mislabelled-identical",
        "How do I rotate my access token?",
        "Tokens are rotated from Settings → Tokens → Rotate; the old token stops working after one hour.",
        "tickets",
        "2025-q4",
        negative="Tokens are rotated from Settings → Tokens → Rotate; the old token stops working after one hour.",
    )
    add(
        "mislabelled-case",
        "What does error 429 mean?",
        "Error 429 means too many requests: slow down and retry after the Retry-After header.",
        "tickets",
        "2025-q4",
        negative="error 429 means too many requests: slow down and retry after the retry-after header",
    )
    add(
        "mislabelled-linked",
        "How do I reset a forgotten password?",
        "Passwords can be reset from the sign-in page with the Forgot password link.",
        "tickets",
        "2026-q1",
        negative="Use the Forgot password link on the sign-in page; a reset email arrives within five minutes.",
    )
    cases.append(
        {
            "name": "mislabelled-negative",
            "mechanism": "a hard negative identical to its own row's positive",
            "kind": "mislabelled",
            "severity": "certain",
            "rows": ["mislabelled-identical", "mislabelled-case", "mislabelled-linked"],
        }
    )
    # mislabelled-linked shares its anchor with the multi-answer/pw rows: it is part of that case too.
    pw_ids = ["multi-pw-0", "multi-pw-1", "multi-pw-2"]
    cases.append(
        {
            "name": "multi-answer/pw-extra",
            "mechanism": "one query with several valid documents",
            "kind": "same-anchor",
            "severity": "certain",
            "pairs": [["mislabelled-linked", b] for b in pw_ids] + [[b, "mislabelled-linked"] for b in pw_ids],
        }
    )

    # 5. Chains of positive pairs (symmetric paraphrase rows): x→y and y→z link x, y and z.
    chains = [
        (
            "deploy",
            "The deploy failed after I upgraded the compiler",
            "Compiler upgrade breaks the deployment build",
            "Build pipeline broken since the new compiler version",
        ),
        (
            "sso",
            "SSO login loops back to the sign-in page",
            "Single sign-on keeps redirecting me to login",
            "After SAML setup the single sign-on page keeps redirecting to login",
        ),
    ]
    for key, x, y, z in chains:
        a, b = f"chain-{key}-xy", f"chain-{key}-yz"
        add(a, x, y, "forum", "2025-q3")
        add(b, y, z, "forum", "2025-q3")
        cases.append(
            {
                "name": f"linked-chain/{key}",
                "mechanism": "texts linked through the dataset's own positive pairs",
                "kind": "linked",
                "severity": "certain",
                "pairs": [[a, b]],
            }
        )
        # Seen from the y→z row, the x→y row's positive is y itself: its own anchor.
        cases.append(
            {
                "name": f"linked-chain/{key}-reverse",
                "mechanism": "a positive that is the anchor of another row",
                "kind": "exact",
                "severity": "certain",
                "pairs": [[b, a]],
            }
        )

    # 6. Declared groups: rows the data owner marked as mutual positives.
    groups = [
        (
            "billing-dispute",
            [
                (
                    "I was charged twice this month",
                    "Duplicate charges are reversed automatically within five business days.",
                ),
                (
                    "why do I see two payments on my card",
                    "A pending authorisation can look like a second payment; it disappears when it settles.",
                ),
                (
                    "double billing on my statement",
                    "Contact billing support with both transaction IDs if a duplicate charge does not reverse.",
                ),
            ],
        ),
        (
            "data-residency",
            [
                (
                    "can my data stay in the EU",
                    "Choose an EU region when you create the project; data at rest never leaves it.",
                ),
                (
                    "GDPR data location requirements",
                    "Our data processing addendum lists the sub-processors and regions used for each service.",
                ),
            ],
        ),
    ]
    for key, members in groups:
        ids = [f"group-{key}-{i}" for i in range(len(members))]
        for rid, (q, d) in zip(ids, members, strict=True):
            add(rid, q, d, "tickets", "2026-q1", group=key)
        cases.append(
            {
                "name": f"declared-group/{key}",
                "mechanism": "rows declared mutual positives by a group column",
                "kind": "declared",
                "severity": "certain",
                "pairs": [[a, b] for a in ids for b in ids if a != b],
            }
        )

    # 7. Paraphrased documents in different rows: no shared text, so only near-duplicate or
    #    embedding evidence can find them.
    paraphrases = [
        (
            "How can I see who changed a setting?",
            "Every configuration change is recorded in the audit log with the author and time.",
            "Who edited our project configuration yesterday?",
            "The audit log records each settings change together with who made it and when.",
        ),
        (
            "Our webhook receiver gets duplicate events",
            "Webhook deliveries are at-least-once; deduplicate on the event ID header.",
            "Same webhook event delivered twice",
            "Events may be delivered more than once, so use the event ID to drop duplicates.",
        ),
        (
            "How long are backups kept?",
            "Backups are retained for 35 days unless you set a longer retention period.",
            "backup retention period",
            "By default we keep each backup for 35 days; the retention can be extended.",
        ),
        (
            "Can I undo a deploy?",
            "Promote a previous release from the Deployments list to roll back in under a minute.",
            "revert to the previous release",
            "To roll back, pick an earlier release in Deployments and promote it; it takes less than a minute.",
        ),
    ]
    for i, (q1, d1, q2, d2) in enumerate(paraphrases):
        a, b = f"paraphrase-{i}-a", f"paraphrase-{i}-b"
        add(a, q1, d1, "docs", "2025-q4")
        add(b, q2, d2, "forum", "2026-q1")
        cases.append(
            {
                "name": f"paraphrased-docs/{i}",
                "mechanism": "paraphrased documents in different rows",
                "kind": "semantic",
                "severity": "likely",
                "pairs": [[a, b], [b, a]],
            }
        )
    return rows, cases


def main() -> None:
    rng = random.Random(20261203)
    clean = clean_rows(rng)
    planted, cases = planted_rows()
    rows = clean + planted
    rng.shuffle(rows)
    with (HERE / "pairs.jsonl").open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    truth = {
        "description": "What generate.py planted in pairs.jsonl. 'pairs' are [anchor id, candidate id]: "
        "the candidate's positive is a false negative for the anchor whenever both rows share a batch "
        "(direction query_to_doc). 'semantic' cases need near-duplicate or embedding evidence.",
        "clean_prefix": "clean-",
        "rows": len(rows),
        "cases": cases,
    }
    (HERE / "truth.json").write_text(json.dumps(truth, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
