"""``--fail-on`` thresholds → pass/fail. The only place that decides exit code 1."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

from contrast_audit.errors import ConfigError

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne}
_EXPR = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_-]*)\s*(>=|<=|==|!=|>|<)\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*$")


@dataclass(frozen=True)
class Condition:
    metric: str
    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"


@dataclass(frozen=True)
class GateResult:
    failed: list[tuple[Condition, float]]
    checked: list[tuple[Condition, float]]

    @property
    def passed(self) -> bool:
        return not self.failed


def parse(expressions: list[str], metrics: list[str]) -> list[Condition]:
    """Parse expressions such as ``findings>0`` or ``fn-rate>0.001``; several may share one
    argument, separated by commas."""
    out: list[Condition] = []
    for text in (part for expr in expressions for part in expr.split(",") if part.strip()):
        match = _EXPR.match(text)
        if not match:
            raise ConfigError(
                f"--fail-on '{text}' is not METRIC OP NUMBER",
                fix="write for example findings>0, fn-rate>0.001 or likely>=10",
            )
        name, op, value = match.groups()
        name = name.replace("_", "-") if name.replace("_", "-") in metrics else name
        if name not in metrics:
            raise ConfigError(f"--fail-on: unknown metric '{name}'", fix=f"valid metrics: {', '.join(metrics)}")
        out.append(Condition(name, op, float(value)))
    return out


def evaluate(conditions: list[Condition], metrics: dict[str, float]) -> GateResult:
    checked = [(c, float(metrics[c.metric])) for c in conditions]
    failed = [(c, v) for c, v in checked if _OPS[c.op](v, c.value)]
    return GateResult(failed, checked)
