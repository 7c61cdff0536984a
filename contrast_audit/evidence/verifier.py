"""An optional second stage: a sentence-transformers ``CrossEncoder`` rescores what the detectors flag.

A bi-encoder compares two texts through two vectors made apart; a cross-encoder reads both texts at
once and tells a paraphrase from a same-topic sentence far better, at a cost per pair. So it rescores
only the pairs the detectors found at ``likely`` or ``suspect`` (``certain`` evidence is identity or
the data's own labels): each is ``likely`` when the cross-encoder scores it at or above the bar, and
``suspect`` below it. The verifier scores the compared text (the anchor; for ``doc_to_*`` directions
the positive) against the candidate.

The bar, like the embedding bars, comes from the data's own pairs: the ``quantile`` of the
cross-encoder's scores on up to ``CALIBRATION_PAIRS`` seeded rows' own (anchor, positive) pairs, held at
or above the 99th percentile of its scores on as many random pairs of rows, so a loose data set cannot
make everything equivalent. An explicit ``threshold`` wins. Any ``CrossEncoder`` with one output (a
duplicate-question, STS or relevance model) can serve, as a local directory or a hub id already in the
Hugging Face cache; nothing is downloaded. Its ``config.json`` is read before it is loaded: a
sentence-embedding model (a bi-encoder) or any other model without a sequence-classification head
would be given a randomly initialised one by ``CrossEncoder``, and is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from contrast_audit import model as model_io
from contrast_audit.calibration import random_row_pairs
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE, Corpus
from contrast_audit.errors import ModelError
from contrast_audit.evidence.base import LIKELY, SUSPECT, Hits, Pairs
from contrast_audit.evidence.blocks import role_texts

CALIBRATION_PAIRS = 256
FLOOR_QUANTILE = 0.99
NEEDS = "--verifier needs a cross-encoder (a sequence-classification model with one output)"
SENTENCE_EMBEDDING_TYPES = ("SentenceTransformer", "SparseEncoder")


class Verifier:
    name = "verifier"
    description = "a cross-encoder rescores the likely and suspect candidates against a bar from the data's own pairs"
    RULES = ("cross-encoder score at or above the bar", "cross-encoder score below the bar")

    def __init__(
        self,
        path: str,
        threshold: float | None = None,
        quantile: float = 0.5,
        batch_size: int = 32,
        device: str | None = None,
        seed: int = 0,
    ) -> None:
        self.path = path
        self.explicit = threshold
        self.quantile = quantile
        self.batch_size = batch_size
        self.device = device
        self.seed = seed
        self.threshold = float("nan") if threshold is None else float(threshold)
        self.scored = 0
        self.calibration: dict[str, Any] = {}
        self.directory: Path | None = None  # where the model was found (a hub id's cached snapshot)
        self.revision: str | None = None  # the snapshot's commit hash, for a hub id

    def check(self) -> None:
        """Find the model and read its config before any text is embedded: a path that is not a
        directory, a hub id not in the cache, or a model that is not a one-output cross-encoder is an error."""
        given = Path(self.path).expanduser()
        if not given.exists() and model_io.is_hub_id(self.path):
            given, self.revision = model_io.hub_snapshot(self.path, "verifier")
        if not given.is_dir():
            raise ModelError(
                f"verifier {self.path}: not a directory",
                fix="name a local sentence-transformers CrossEncoder directory, or the hub id of one in the Hugging "
                "Face cache (nothing is downloaded)",
            )
        self.directory = given
        check_cross_encoder(given, self.path)

    def _load(self):
        self.check()
        from sentence_transformers import CrossEncoder

        try:
            model = CrossEncoder(
                str(self.directory), device=self.device, trust_remote_code=False, local_files_only=True
            )
        except Exception as exc:  # a broken or foreign directory: a user error, not ours
            raise ModelError(
                f"verifier {self.path}: could not be loaded as a CrossEncoder ({type(exc).__name__}: {exc})",
                fix="name a directory saved by sentence-transformers' CrossEncoder.save_pretrained",
            ) from None
        labels = getattr(model, "num_labels", 1)
        if labels != 1:
            raise several_outputs(self.path, labels)
        return model

    def prepare(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self.model = self._load()
        texts = corpus.texts.get_column("text")
        own = np.flatnonzero(corpus.anchor != corpus.positive)
        rng = np.random.default_rng(self.seed)
        if own.shape[0] > CALIBRATION_PAIRS:
            own = np.sort(rng.choice(own, CALIBRATION_PAIRS, replace=False))
        i, j = random_row_pairs(corpus.n_rows, own.shape[0], self.seed)
        positive = self.score(texts.gather(corpus.anchor[own]).to_list(), texts.gather(corpus.positive[own]).to_list())
        random = self.score(texts.gather(corpus.anchor[i]).to_list(), texts.gather(corpus.positive[j]).to_list())
        if self.explicit is None:
            if positive.shape[0] == 0:
                raise ModelError(
                    "verifier: no row has a positive of its own to calibrate the bar on",
                    fix="give the bar with --verifier-threshold",
                )
            bar = float(np.quantile(positive, self.quantile))
            floor = float(np.quantile(random, FLOOR_QUANTILE)) if random.shape[0] else bar
            self.threshold = max(bar, floor)
        self.calibration = {
            "rows": int(positive.shape[0]),
            "random_pairs": int(random.shape[0]),
            "positive_quantile": None
            if positive.shape[0] == 0
            else round(float(np.quantile(positive, self.quantile)), 4),
            "random_q99": None if random.shape[0] == 0 else round(float(np.quantile(random, FLOOR_QUANTILE)), 4),
        }

    def score(self, left: list[str], right: list[str]) -> np.ndarray:
        if not left:
            return np.zeros(0, dtype=np.float64)
        out = self.model.predict(
            list(zip(left, right, strict=True)), batch_size=self.batch_size, show_progress_bar=False
        )
        self.scored += len(left)
        return np.asarray(out, dtype=np.float64).reshape(-1)

    def verify(self, pairs: Pairs, checked: np.ndarray) -> Hits:
        """Scores the pairs marked ``checked``: ``likely`` at or above the bar, ``suspect`` below."""
        c = self.corpus
        idx = np.flatnonzero(checked)
        score = np.zeros(len(pairs), dtype=np.float64)
        if idx.size:
            compared_role = POSITIVE_ROLE if pairs.direction.startswith("doc_to") else ANCHOR_ROLE
            texts = c.texts.get_column("text")
            left = texts.gather(role_texts(c, pairs.anchor_row[idx], compared_role)).to_list()
            right = texts.gather(pairs.cand_tid[idx]).to_list()
            score[idx] = self.score(left, right)
        passed = score >= self.threshold
        return Hits(
            self.name,
            checked.copy(),
            score,
            self.threshold,
            np.where(passed, LIKELY, SUSPECT).astype(np.int8),
            np.where(passed, 0, 1).astype(np.int64),
            self.RULES,
        )

    def info(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "model_path": None if self.directory is None else str(self.directory),
            "revision": self.revision,
            "threshold": None if np.isnan(self.threshold) else round(self.threshold, 4),
            "bar": "explicit"
            if self.explicit is not None
            else f"quantile {self.quantile:g} of the rows' own pairs' "
            f"scores, at least the {FLOOR_QUANTILE:g} quantile of random pairs'",
            "calibration": self.calibration,
            "scored": self.scored,
        }


def several_outputs(name: str, labels: int) -> ModelError:
    return ModelError(
        f"verifier {name}: the model gives {labels} scores per pair; a verifier needs one",
        fix="use a CrossEncoder with one output (duplicate-question, STS or relevance models)",
    )


def _read_json(path: Path, name: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelError(
            f"verifier {name}: {path} cannot be read ({exc})", fix="name a directory saved by CrossEncoder"
        ) from None
    return value if isinstance(value, dict) else {}


def check_cross_encoder(directory: Path, name: str) -> None:
    """Refuse, from its config files alone, a model that ``CrossEncoder`` would give a new, randomly
    initialised scoring head (a bi-encoder, a bare or masked-language model) or several outputs."""
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ModelError(
            f"verifier {name}: no config.json in {directory}",
            fix="name a directory saved by sentence-transformers' CrossEncoder.save_pretrained",
        )
    config = _read_json(config_path, name)
    architectures = [str(a) for a in config.get("architectures") or []]
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        labels = len(config.get("id2label") or {}) or 1
        if labels != 1:
            raise several_outputs(name, labels)
        return
    saved = _read_json(directory / "config_sentence_transformers.json", name).get("model_type")
    if saved == "CrossEncoder":
        return  # saved as one by sentence-transformers (a reranker scoring with its own modules)
    fix = "give --verifier a duplicate-question, STS or relevance CrossEncoder"
    if saved in SENTENCE_EMBEDDING_TYPES or _pools(directory):
        raise ModelError(
            f"{name} is a sentence-embedding model, not a CrossEncoder: {NEEDS}",
            fix=f"pass it to --model instead, and {fix}",
        )
    if architectures:
        raise ModelError(f"{name} is a {', '.join(architectures)} checkpoint, not a CrossEncoder: {NEEDS}", fix=fix)


def _pools(directory: Path) -> bool:
    """Whether a sentence-transformers ``modules.json`` pools token vectors into one (a bi-encoder)."""
    try:
        modules = json.loads((directory / "modules.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(modules, list) and any(
        isinstance(m, dict) and str(m.get("type", "")).rsplit(".", 1)[-1] == "Pooling" for m in modules
    )
