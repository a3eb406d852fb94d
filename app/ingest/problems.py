"""Where and why input could not be read: the ingest layer's one error vocabulary.

A `Problem` is data (lenient reads collect them and go on); an `IngestError` is the exception
that carries one or more of them when a read cannot go on (strict mode, a path that is not
there).  The edges (CLI, HTTP) translate both into messages and status codes once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One bad record, line or file, and exactly where it is.

    `offset` is a byte offset into `source` (event files), `line` a 1-based line number and
    `json_path` a JSONPath-like locator (JSON/CSV inputs).  Unknown parts stay None.
    """

    source: str
    reason: str
    offset: int | None = None
    line: int | None = None
    json_path: str | None = None

    def __str__(self) -> str:
        where = [self.source]
        if self.offset is not None:
            where.append(f"byte {self.offset}")
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.json_path is not None:
            where.append(self.json_path)
        return f"{': '.join(where)}: {self.reason}"


class IngestError(Exception):
    """Input that cannot be read at all, or any bad record under strict parsing."""

    def __init__(self, problems: list[Problem] | Problem) -> None:
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
