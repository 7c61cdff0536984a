"""Engines: the drivers that run the audit's stages (load → normalise → plan → evidence → judge).

``memory`` holds every text at once (``api.prepare`` and ``judge.judge``); ``stream``
(``engine.stream``) keeps texts on disk and judges runs of global batches one at a time, so its memory
follows its run size and a few hundred bytes a row, not the texts (with embedding evidence, what is
decided over every text is decided first: ``engine.vectors``); ``ray`` (``engine.on_ray``) runs
``stream``'s runs on Ray Data, each embedding its own texts on a worker; on a cluster with GPUs, or with
evidence whose bars need every row's vectors, ``memory`` with the vectors computed on Ray.
``auto`` picks ``memory`` when the input fits ``--max-memory`` and ``stream`` when it does not and the
audit can be streamed. docs/scale.md says when to use which.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from contrast_audit import resources
from contrast_audit.config import AuditConfig


def choose(cfg: AuditConfig, files: list[Path]) -> str:
    """The engine for ``cfg.engine`` (``memory``, ``stream`` or ``ray``), ``auto`` decided by the input's size."""
    if cfg.engine != "auto":
        return cfg.engine
    limit = resources.parse_size(cfg.max_memory)
    if limit is None or resources.load_estimate(resources.input_bytes(files)) <= limit:
        return "memory"
    from contrast_audit.engine.stream import unsupported

    return "memory" if unsupported(cfg) is not None else "stream"


def streams(cfg: AuditConfig) -> bool:
    """Whether the streaming engine can run ``cfg``."""
    from contrast_audit.engine.stream import unsupported

    return unsupported(cfg) is None


def embeds_on_ray(cfg: AuditConfig) -> bool:
    """Whether ``--engine ray`` runs ``cfg`` as the in-memory engine with its vectors computed on Ray
    (embedding evidence whose bars need every row's vectors: ``--pair``, ``--above-positive``,
    ``--verifier``), rather than as the stream engine on Ray, the runs judged (and embedded) on the
    workers. A cluster with GPUs computes the vectors on them either way: ``api.audit`` asks Ray.
    Refuses what needs every text at once and has nothing to embed."""
    from contrast_audit.engine.stream import unsupported

    why = unsupported(cfg)
    if why is None:
        return False
    if cfg.embedding.enabled:
        return True
    from contrast_audit.errors import ConfigError

    raise ConfigError(f"the ray engine cannot run this audit: {why}", fix="pass --engine memory")


def streaming_hint(cfg: AuditConfig) -> str:
    """What a refusal of the in-memory engine can add: how this audit could stream instead."""
    from contrast_audit.engine.stream import unsupported

    why = unsupported(cfg)
    if why is None:
        return ", or stream it (--engine stream)"
    if why == unsupported(replace(cfg, embedding=replace(cfg.embedding, enabled=False))):
        return ""  # something besides embeddings needs every text at once
    return ", or stream it without embedding evidence (--no-embeddings)"


__all__ = ["choose", "embeds_on_ray", "streaming_hint", "streams"]
