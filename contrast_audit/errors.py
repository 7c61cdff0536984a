"""Errors and exit codes: one message style, one place that maps failures to exit codes.

Exit codes: 0 ok, 1 the gate failed (only the gate decides), 2 usage, config or input error,
3 internal error.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class AuditError(Exception):
    """A user-facing error: the message says what, where and how to fix it."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        return f"{self.message} — {self.fix}" if self.fix else self.message


class InputError(AuditError):
    """Bad input data, located as ``file:line`` (or ``file: row N``) and, when known, a column."""

    def __init__(
        self,
        path: str,
        message: str,
        *,
        line: int | None = None,
        row: int | None = None,
        column: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.row = row
        self.column = column
        where = path
        if line is not None:
            where = f"{path}:{line}"
        elif row is not None:
            where = f"{path}: row {row}"
        col = f"column '{column}' " if column else ""
        super().__init__(f"{where}: {col}{message}", fix=fix)


class ConfigError(AuditError):
    """A bad flag, option value or configuration file entry."""


class ModelError(AuditError):
    """The embedding model cannot be found, verified or loaded."""
