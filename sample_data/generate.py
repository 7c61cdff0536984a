"""Write the sample developer-support pair set (pairs.jsonl) and what is planted in it (truth.json).

Deterministic and standard-library only: `python3 sample_data/generate.py` rewrites both files.
Clean rows are composed from a support-site vocabulary so that no two clean rows share a text or a
positive; planted rows hold the false-negative mechanisms described in docs/sample-data.md.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = ("docs", "forum", "tickets", "catalog")
COHORTS = ("2025-q3", "2025-q4", "2026-q1")

PRODUCTS = [
    "the billing dashboard",
    "the CLI",
    "the Python SDK",
    "the Node SDK",
    "the REST API",
    "the admin console",
    "the mobile app",
    "the webhooks service",
    "the data export tool",
    "the audit log",
    "the search API",
    "the file storage service",
    "the message queue",
    "the identity service",
    "the metrics agent",
    "the deployment pipeline",
    "the Terraform provider",
    "the Go client",
    "the Java client",
    "the status page",
]
TASKS = [
    (
        "rotate an API key",
        "Open Settings → API keys, choose Rotate, then update every client that used the old key within 24 hours.",
    ),
    (
        "enable two-factor authentication",
        "Go to Security, select Two-factor, scan the QR code with an authenticator app and enter the six-digit code.",
    ),
    (
        "change the default region",
        "Set the region field under Project settings; resources already created stay where they are.",
    ),
    (
        "invite a teammate",
        "Use Members → Invite, enter their email address and pick a role; the invitation expires after seven days.",
    ),
    (
        "download an invoice as PDF",
        "Each line in Billing → History has a PDF link; invoices are generated on the first day of the month.",
    ),
    (
        "set up a webhook endpoint",
        "Register the HTTPS URL under Webhooks, pick the event types and verify the signing secret on receipt.",
    ),
    (
        "increase the rate limit",
        "Rate limits are per plan; request a higher quota from the Limits page or upgrade the plan.",
    ),
    (
        "export audit events to CSV",
        "Filter the audit log by date, then choose Export; large exports are emailed as a zipped CSV.",
    ),
    (
        "configure single sign-on",
        "Upload your identity provider's SAML metadata under Authentication and map the email attribute.",
    ),
    (
        "delete a project permanently",
        "Projects can be deleted by an owner from Project settings; deletion is final after a 30-day grace period.",
    ),
    (
        "pin a dependency version",
        "Declare the exact version in your lock file; the resolver will not upgrade pinned packages.",
    ),
    (
        "retry failed jobs automatically",
        "Add a retry policy with a maximum attempt count and exponential backoff to the job definition.",
    ),
    (
        "stream logs to an external sink",
        "Create a log drain with the sink's URL and token; only new log lines are forwarded.",
    ),
    (
        "restore a deleted file",
        "Deleted files stay in the trash for 30 days; select the file there and choose Restore.",
    ),
    (
        "rename an environment",
        "Environment names are editable in the environment's settings panel; URLs keep working after a rename.",
    ),
    (
        "schedule a nightly backup",
        "Create a backup schedule with a cron expression and a retention period under Backups.",
    ),
    (
        "transfer ownership of an organisation",
        "The current owner opens Organisation → Ownership and selects a member with the admin role.",
    ),
    (
        "debug a timeout error",
        "Timeouts usually mean a slow upstream; raise the client timeout and check the latency graph first.",
    ),
    (
        "paginate through results",
        "Pass the cursor from the previous response's next field; a missing cursor means the last page.",
    ),
    (
        "verify a webhook signature",
        "Compute an HMAC-SHA256 of the raw body with your signing secret and compare it in constant time.",
    ),
    (
        "mask personal data in exports",
        "Turn on field masking for the export and list the columns that hold personal data.",
    ),
    (
        "cancel a subscription",
        "Owners cancel from Billing → Plan; the workspace stays active until the end of the paid period.",
    ),
    (
        "add a custom domain",
        "Add the domain under Domains and create the CNAME record shown; certificates are issued automatically.",
    ),
    (
        "set an environment variable",
        "Define variables under Configuration; secret values are encrypted and hidden after saving.",
    ),
    (
        "upgrade to the latest major version",
        "Read the migration guide, run the codemod for renamed options, then bump the version.",
    ),
    (
        "limit access by IP address",
        "Add CIDR ranges to the allowlist under Network; requests from other addresses get a 403.",
    ),
    (
        "generate a client from the OpenAPI spec",
        "Download the spec from the API reference page and run your generator against it.",
    ),
    (
        "monitor memory usage",
        "The metrics agent reports resident memory per process; set an alert at 80 percent of the limit.",
    ),
    (
        "roll back a deployment",
        "Pick an earlier release in the Deployments list and choose Promote; traffic switches within a minute.",
    ),
    (
        "resolve a merge conflict in configuration",
        "Keep both changes in the config file, validate it with the lint command and redeploy.",
    ),
]
QUESTION_FORMS = [
    "How do I {task} in {product}?",
    "{Task} with {product}: what are the steps?",
    "Is there a way to {task} from {product}?",
    "Where can I {task} using {product}?",
    "Need help: cannot figure out how to {task} in {product}",
]
DOC_FORMS = [
    "{Product}: {answer}",
    "In {product}, {answer_lc}",
    "Guide for {product} — {answer}",
]


def cap(text: str) -> str:
    return text[0].upper() + text[1:]


def clean_rows(rng: random.Random, n: int) -> list[dict]:
    combos = [(t, p) for t in range(len(TASKS)) for p in range(len(PRODUCTS))]
    rng.shuffle(combos)
    rows = []
    for i, (t, p) in enumerate(combos[:n]):
        task, answer = TASKS[t]
        product = PRODUCTS[p]
        q = rng.choice(QUESTION_FORMS).format(task=task, Task=cap(task), product=product)
        d = rng.choice(DOC_FORMS).format(
            product=product, Product=cap(product), answer=answer, answer_lc=answer[0].lower() + answer[1:]
        )
        row = {
            "id": f"clean-{i:04d}",
            "anchor": q,
            "positive": d,
            "source": rng.choice(SOURCES[:3]),
            "cohort": rng.choice(COHORTS),
        }
        if i % 3 == 0:
            # A hard negative: the same product, a different task (a real near-miss, not a duplicate).
            other_task, other_answer = TASKS[(t + 7) % len(TASKS)]
            row["negative"] = f"{cap(product)} ({other_task}): {other_answer}"
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
            "After SAML setup the login page reloads endlessly",
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
    clean = clean_rows(rng, 560)
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
