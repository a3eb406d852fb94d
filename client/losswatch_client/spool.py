"""Points the service could not take yet, on disk, in the order they were logged.

One NDJSON point a line, in the service's own record format, so a spool left behind can be
posted by hand (`curl --data-binary @FILE -H 'Content-Type: application/x-ndjson'
URL/v1/runs/RUN/points`) or is replayed by the next watcher of the same run.  Lines are
appended at the end and replayed from the front; once everything is replayed the file is
emptied.  The file is locked while a watcher uses it, so two processes never share one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Tuple

try:
    import fcntl
except ImportError:  # Windows: no lock, one file per process below
    fcntl = None


class SpoolFull(Exception):
    """The spool reached its size limit: what did not fit was not kept."""


class Spool:
    def __init__(self, path: Path, max_bytes: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.path, self._file = _open_locked(path)
        self._file.seek(0, os.SEEK_END)
        self._size = self._file.tell()
        self._read_at = 0
        self.leftover_points = _count_lines(self._file) if self._size else 0  # an earlier process's

    @property
    def pending(self) -> bool:
        return self._read_at < self._size

    @property
    def size(self) -> int:
        return self._size

    def append(self, lines: List[bytes]) -> None:
        """Append lines (each ending in a newline); as many as fit, then SpoolFull."""
        room = self.max_bytes - self._size
        fits, used = 0, 0
        for line in lines:
            if used + len(line) > room:
                break
            fits, used = fits + 1, used + len(line)
        if fits:
            self._file.seek(0, os.SEEK_END)
            self._file.write(b"".join(lines[:fits]))
            self._file.flush()
            self._size += used
        if fits < len(lines):
            raise SpoolFull(len(lines) - fits)

    def peek(self, max_lines: int) -> Tuple[List[bytes], int]:
        """The next lines to replay and the offset after them (pass it to `advance`)."""
        self._file.seek(self._read_at)
        lines, end = [], self._read_at
        while len(lines) < max_lines and end < self._size:
            line = self._file.readline()
            if not line:
                break
            if not line.endswith(b"\n"):  # cut short by a crash mid-write: not a point
                end = self._size
                break
            lines.append(line)
            end += len(line)
        return lines, end

    def advance(self, end: int) -> None:
        """The lines up to `end` were delivered; once all were, the file is emptied."""
        self._read_at = end
        if self._read_at >= self._size:
            self._file.truncate(0)
            self._file.flush()
            self._size = self._read_at = 0

    def close(self) -> None:
        """Close; an empty spool leaves no file behind."""
        empty = not self.pending
        if empty:
            try:
                self.path.unlink()
            except OSError:
                pass
        self._file.close()

    def detach(self) -> None:
        """In a forked child: forget the parent's file without touching it."""
        self._file = None


def _open_locked(path: Path):
    """The spool file, locked; if another live process holds it, a file of this process's own."""
    candidates = [path, path.with_name(f"{path.stem}.{os.getpid()}{path.suffix}")]
    for candidate in candidates:
        handle = open(candidate, "a+b")
        if fcntl is None:
            if candidate is candidates[-1]:
                return candidate, handle
            handle.close()
            continue
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return candidate, handle
        except OSError:
            handle.close()
    raise OSError(f"the spool files {candidates[0]} and {candidates[1]} are both in use by other processes")


def _count_lines(handle) -> int:
    handle.seek(0)
    count = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    handle.seek(0, os.SEEK_END)
    return count

