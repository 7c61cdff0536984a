"""``--fail-on`` thresholds → pass/fail. The only place that decides exit code 1."""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass

from contrast_audit.errors import ConfigError

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne}
_NUMBER = r"[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|inf(?:inity)?)"
_EXPR = re.compile(rf"^\s*([A-Za-z][A-Za-z0-9_-]*)\s*(>=|<=|==|!=|>|<)\s*({_NUMBER})\s*$", re.IGNORECASE)

GRAMMAR = (
    "METRIC OP NUMBER: OP is one of > >= < <= == !=; NUMBER is a decimal such as 0, -1, 0.001, 1e-3 or inf "
    "(numbers too large for a float, like 1e309, are inf too); several conditions may be comma-separated "
    "or given in several --fail-on; the gate fails when any holds"
)


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
    argument, separated by commas (see ``GRAMMAR``). An empty expression is an error: a gate that
    checks nothing would pass silently."""
    out: list[Condition] = []
    for expr in expressions:
        if not isinstance(expr, str):
            raise ConfigError(f"--fail-on {expr!r} is not METRIC OP NUMBER", fix="give a string such as findings>0")
        for text in expr.split(","):
            out.append(_condition(text, metrics))
    return out


def _condition(text: str, metrics: list[str]) -> Condition:
    if not text.strip():
        raise ConfigError(
            "--fail-on holds an empty condition", fix="write for example findings>0, or drop the empty --fail-on"
        )
    match = _EXPR.match(text)
    if not match:
        raise ConfigError(
            f"--fail-on '{text.strip()}' is not METRIC OP NUMBER",
            fix="write for example findings>0, fn-rate>0.001 or likely>=10",
        )
    name, op, value = match.groups()
    name = name.replace("_", "-") if name.replace("_", "-") in metrics else name
    if name not in metrics:
        raise ConfigError(f"--fail-on: unknown metric '{name}'", fix=f"valid metrics: {', '.join(metrics)}")
    number = float(value)  # '1e309' and 'inf' are both infinity
    assert not math.isnan(number)
    return Condition(name, op, number)


def evaluate(conditions: list[Condition], metrics: dict[str, float]) -> GateResult:
    checked = [(c, float(metrics[c.metric])) for c in conditions]
    failed = [(c, v) for c, v in checked if _OPS[c.op](v, c.value)]
    return GateResult(failed, checked)
