"""Opening and reading the files of a logdir without ever hanging, and only where allowed.

A logdir is written by other programs and can hold anything: a FIFO named like an event
file (opening it for reading would wait for a writer forever), a device, a symlink to a
file outside the directories the service may read, a file on a network filesystem that
stops answering.  So:

* only regular files are read: the path is checked before opening (a device is never even
  opened), opened with O_NONBLOCK (a FIFO swapped in meanwhile does not block the open) and
  checked again on the open descriptor;
* with allowed roots (the service), the file's real path must lie under one of them: checked
  before opening on the resolved path, which is then opened without following a last
  symlink, and checked again on what the descriptor points at (Linux: /proc/self/fd);
* every call that touches the file (open, each read) runs on the file's own worker thread
  and must answer within `timeout` seconds.  A call that does not is abandoned (its thread
  stays blocked in the kernel until the filesystem answers, holding nothing else) and the
  file is reported as timed out; the reader goes on with the other files.
"""

from __future__ import annotations

import io
import os
import queue
import stat
import threading
from collections.abc import Callable, Sequence
from typing import ClassVar, TypeVar

from app.ingest.problems import IngestError, Problem

READ_TIMEOUT = 30.0  # seconds one open or one chunk read may take: a hung filesystem, not a slow one
_T = TypeVar("_T")

_KINDS = {
    stat.S_ISFIFO: "a FIFO",
    stat.S_ISCHR: "a character device",
    stat.S_ISBLK: "a block device",
    stat.S_ISSOCK: "a socket",
    stat.S_ISDIR: "a directory",
}


class ReadTimeout(Exception):
    """A call on the file did not answer in time; the file was abandoned."""


def under_roots(real: str, roots: Sequence[str]) -> bool:
    """Whether the resolved path `real` lies under one of `roots` (each resolved too)."""
    for root in roots:
        top = os.path.realpath(root)
        if os.path.commonpath([real, top]) == top:
            return True
    return False


def not_regular(mode: int) -> str | None:
    """What a non-regular file is ("a FIFO", ...), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS.items() if test(mode)), "not a regular file")


def skipped(kind: str) -> str:
    return f"not a regular file ({kind}): skipped"


OUTSIDE_ROOTS = "its real path is outside the allowed roots: skipped"


class SafeFile:
    """One regular file, open for reading, every call bounded by `timeout` (see the module).

    Raises IngestError (with `path` and a reason) when the file cannot be opened, is not a
    regular file, or lies outside `roots`; `ReadTimeout` when a call does not answer.
    `roots=None` means no restriction (the command line reads what its user can read).
    `start` holds the file's first `start_bytes` bytes, read with the open (one call fewer).
    `noun` names the file in messages ("cannot read event file: ..."), `at` is the byte
    offset they give (where the caller meant to read).
    """

    def __init__(
        self, path: str, roots: Sequence[str] | None = None, timeout: float = READ_TIMEOUT, *,
        start_bytes: int = 0, noun: str = "event file", at: int | None = None,
    ) -> None:
        self.path, self.timeout, self.noun, self.at = path, timeout, noun, at
        self.fd: int | None = None
        self.size = 0
        self.start = b""
        self._worker = _Worker.take()
        self._call(self._open_on_worker(roots, start_bytes))

    def pread(self, size: int, offset: int) -> bytes:
        return self._call(lambda: os.pread(self.fd, size, offset))

    def close(self) -> None:
        self._worker.finish(self._close)

    def __enter__(self) -> SafeFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_on_worker(self, roots: Sequence[str] | None, start_bytes: int) -> Callable[[], None]:
        def run() -> None:
            self.fd, self.size = _open(self.path, roots)
            if start_bytes:
                self.start = os.pread(self.fd, min(start_bytes, self.size), 0)

        return run

    def _close(self) -> None:
        """Runs on the worker after whatever call it was in returned (a timed-out open that
        completes late still gets its descriptor closed)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _call(self, fn: Callable[[], _T]) -> _T:
        try:
            return self._worker.call(fn, self.timeout)
        except ReadTimeout:
            self._worker.abandon(self._close)
            raise
        except OSError as e:
            self.close()
            raise IngestError(Problem(self.path, f"cannot read {self.noun}: {e.strerror or e}", offset=self.at)) from e
        except IngestError:
            self.close()
            raise


class SafeStream(io.RawIOBase):
    """A `SafeFile` read as a stream (up to its size when opened), for parsers that take a
    file object: wrap it in `io.BufferedReader` so that each read of the file is large."""

    def __init__(self, f: SafeFile) -> None:
        super().__init__()
        self.file, self.pos = f, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self.pos = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.file.size}[whence] + offset
        return self.pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.file.pread(min(len(buffer), max(0, self.file.size - self.pos)), self.pos) if self.pos < self.file.size else b""
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def bounded(fn: Callable[[], _T], timeout: float) -> _T:
    """`fn()` on a worker thread, which must answer within `timeout` seconds, else
    `ReadTimeout` (the call is abandoned on its thread): a request to a storage service that
    stops answering holds up nothing else."""
    worker = _Worker.take()
    try:
        result = worker.call(fn, timeout)
    except ReadTimeout:
        worker.abandon(lambda: None)
        raise
    except BaseException:
        worker.finish(lambda: None)
        raise
    worker.finish(lambda: None)
    return result


def read_whole(path: str, roots: Sequence[str] | None = None, timeout: float = READ_TIMEOUT) -> bytes:
    """A whole regular file (a JSON/CSV log), under the same rules as event files.
    Raises IngestError, also for a timeout."""
    try:
        with SafeFile(path, roots, timeout, noun="file") as f:
            parts, at = [], 0
            while data := f.pread(16 << 20, at):
                parts.append(data)
                at += len(data)
            return b"".join(parts)
    except ReadTimeout as e:
        raise IngestError(Problem(path, timed_out(timeout))) from e


def read_head(path: str, size: int, roots: Sequence[str] | None = None, timeout: float = READ_TIMEOUT) -> bytes:
    """The first `size` bytes of a regular file (to recognise a log), under the same rules
    as event files.  Raises IngestError, also for a timeout."""
    try:
        with SafeFile(path, roots, timeout, start_bytes=size, noun="file") as f:
            return f.start
    except ReadTimeout as e:
        raise IngestError(Problem(path, timed_out(timeout))) from e


def timed_out(timeout: float) -> str:
    return f"read timed out after {timeout:g} s (a hung filesystem?): the rest is read on a later scan"


def _open(path: str, roots: Sequence[str] | None) -> tuple[int, int]:
    """(descriptor, size) of `path`, checked as the module says; runs on the worker."""
    target = path
    if roots is not None:
        target = os.path.realpath(path)
        if not under_roots(target, roots):
            raise IngestError(Problem(path, OUTSIDE_ROOTS))
    kind = not_regular(os.stat(target).st_mode)
    if kind:
        raise IngestError(Problem(path, skipped(kind)))
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if roots is not None:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(target, flags)
    try:
        info = os.fstat(fd)
        kind = not_regular(info.st_mode)
        if kind:
            raise IngestError(Problem(path, skipped(kind)))
        if roots is not None and not under_roots(_opened(fd, target), roots):
            raise IngestError(Problem(path, OUTSIDE_ROOTS))
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def _opened(fd: int, fallback: str) -> str:
    """The path the descriptor really points at (a directory on the way may have been
    swapped for a symlink after the path was resolved); `fallback` where /proc is missing."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return fallback


class _Worker:
    """A daemon thread that runs the calls on one file at a time, answering each: a call
    that hangs blocks this thread only, and the process can still exit.  Idle workers are
    kept for the next file (a thread per file would cost more than reading a small one)."""

    _idle: ClassVar[list[_Worker]] = []
    _idle_lock: ClassVar[threading.Lock] = threading.Lock()
    MAX_IDLE: ClassVar[int] = 4

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self._abandoned = False
        threading.Thread(target=self._serve, daemon=True, name="losswatch-file").start()

    @classmethod
    def take(cls) -> _Worker:
        with cls._idle_lock:
            if cls._idle:
                return cls._idle.pop()
        return cls()

    def call(self, fn: Callable[[], _T], timeout: float) -> _T:
        self._calls.put((fn, True))
        try:
            ok, value = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise ReadTimeout() from None
        if not ok:
            raise value
        return value

    def finish(self, last: Callable[[], None]) -> None:
        """Run `last` without waiting for it, and serve the next file (not after `abandon`)."""
        if self._abandoned:
            return
        self._calls.put((last, False))
        with self._idle_lock:
            if len(self._idle) < self.MAX_IDLE:
                self._idle.append(self)
                return
        self._calls.put(None)

    def abandon(self, last: Callable[[], None]) -> None:
        """A call hung: run `last` once it returns (if ever), then end the thread."""
        self._abandoned = True
        self._calls.put((last, False))
        self._calls.put(None)

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            fn, answer = item
            try:
                result = (True, fn())
            except BaseException as e:  # handed back to the caller, raised there
                result = (False, e)
            if answer:
                self._answers.put(result)
