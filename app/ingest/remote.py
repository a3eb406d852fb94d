"""Logdirs in object storage: ``s3://``, ``gs://``, ``az://``, ``hdfs://``, ``http(s)://`` and
anything else fsspec knows, read-only, incrementally, as local logdirs are.

Object storage is billed and throttled per request, so a scan costs:

* one paginated listing of the prefix (``find``), which gives every object's size and ETag
  (or generation, mtime...): an unchanged object is recognised from it, with no HEAD and no
  read;
* for an object that grew, one range read of its new tail, starting `SEAM_BYTES` before the
  saved offset.  Writers to object storage re-upload a growing file whole (its ETag changes
  every time), so an ETag change alone cannot mean "rewritten": the bytes just before the
  offset are compared with a fingerprint of what was there at the last read.  If they
  match, the object grew and only its tail is decoded; if not, or if the object shrank, or
  its ETag changed at the same size, it was rewritten, and its run is read again from the
  start (`app.ingest.logdir.read_run`), its stored points replaced, never duplicated.

A URL naming one object (nothing listed under it) is that one source, read as a local file
given by name is (`app.ingest.discover.named_source`).

A stored file's `head` holds, for an object, the seam fingerprint and a digest of its ETag
(32 hex characters, like a local file's head fingerprint).

Credentials come from the backends' own chains (environment, profile, instance role): none
is ever taken on the command line.  Endpoints for MinIO/Ceph/R2 come from the same places
(``AWS_ENDPOINT_URL``).  Every request must answer within the timeout, whatever the backend
(it runs on a worker thread, abandoned if it hangs; S3 also gets botocore's own connect and
read timeouts); a failed request (throttled, timed out, connection lost) is retried with
exponential backoff, then reported as one line naming the object and the reason, and the
scan goes on with the other objects and runs.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from app.ingest import _tfrecord
from app.ingest.discover import SNIFF_BYTES, Found, discover, named_source, root_name
from app.ingest.events import CHUNK_BYTES, EventDecoder, EventFileRead
from app.ingest.files import READ_TIMEOUT, ReadTimeout, bounded
from app.ingest.problems import IngestError, Problem

SEAM_BYTES = 4096  # compared before the saved offset: enough to tell another file from this one
RETRIES = 3  # attempts per request
BACKOFF = 0.5  # seconds before the second attempt, doubled for each later one
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def is_url(path: str) -> bool:
    """Whether `path` names a remote location (``file://`` is a local path)."""
    found = _URL.match(path)
    return found is not None and found.group(1).lower() != "file"


def normalize(url: str) -> str:
    """One spelling per prefix, so a logdir and its runs are stored under one source."""
    return url.rstrip("/") if not url.endswith("://") else url


def url_contains(prefix: str, url: str) -> bool:
    """Whether `url` is `prefix` or lies under it ("s3://b/logs" holds "s3://b/logs/a", not
    "s3://b/logs2")."""
    prefix, url = normalize(prefix), normalize(url)
    return url == prefix or url.startswith(prefix + "/")


@dataclass(frozen=True)
class ObjectInfo:
    size: int
    identity: str  # ETag, generation or mtime: whatever the backend's listing gives ("" if none)


_IDENTITY_KEYS = ("ETag", "etag", "generation", "md5Hash", "version_id", "mtime", "LastModified", "last_modified", "created")


def identity(info: dict) -> str:
    """What changes when an object is rewritten, from a listing entry (the first present)."""
    return next((str(info[k]) for k in _IDENTITY_KEYS if info.get(k) is not None), "")


def open_filesystem(url: str, timeout: float = READ_TIMEOUT):
    """The fsspec filesystem for `url`, with request timeouts where the backend takes them.
    Raises IngestError when the backend is not installed."""
    import fsspec

    protocol = _URL.match(url).group(1).lower()
    options: dict = {}
    if protocol in ("s3", "s3a"):  # retries are ours (with backoff); each attempt is bounded
        options = {"config_kwargs": {"connect_timeout": timeout, "read_timeout": timeout,
                                     "retries": {"total_max_attempts": 1}}}
    try:
        fs, _ = fsspec.core.url_to_fs(url, **options)
    except ImportError as e:
        extra = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure"}
        hint = f"pip install 'losswatch[{extra[protocol]}]'" if protocol in extra else f"install the fsspec backend for {protocol}://"
        raise IngestError(Problem(url, f"cannot read {protocol}:// URLs: {hint}")) from e
    except ValueError as e:  # an unknown protocol
        raise IngestError(Problem(url, f"cannot read this URL: {e}")) from e
    if protocol in ("s3", "s3a"):
        fs.retries = 1  # s3fs's own retry loop (a class default of 5): one attempt, ours retry it
    return fs


def describe_error(error: BaseException) -> tuple[str, bool]:
    """A failed request in words, and whether trying again may help."""
    text = f"{type(error).__name__} {error}"
    if isinstance(error, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        return "access denied", False
    if isinstance(error, FileNotFoundError) or "NoSuchBucket" in text:
        return "no such bucket or object", False
    if re.search(r"SlowDown|Throttl|TooManyRequests|reduce your request rate|\b429\b|\b503\b|EBUSY", text) or (
        isinstance(error, OSError) and error.errno == 16
    ):
        return "throttled by the storage service", True
    if isinstance(error, (TimeoutError, ReadTimeout)) or "Timeout" in text or "timed out" in text:
        return "timed out", True
    if isinstance(error, ConnectionError) or re.search(r"Connect|connection", text):
        return f"cannot connect ({_first_line(error)})", True
    return f"{type(error).__name__}: {_first_line(error)}", False


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__


class RemoteLogdir:
    """One remote prefix: its listing, and range reads of its objects (see the module).

    `fs` is the fsspec filesystem (made from the URL when None: tests inject one, or count
    its calls); `sleep` waits between retries.  Every failure is an IngestError with one
    Problem naming the URL and the reason, after `retries` attempts for the transient ones.
    """

    def __init__(
        self, url: str, fs=None, *, timeout: float = READ_TIMEOUT, retries: int | None = None,
        backoff: float | None = None, sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = normalize(url)
        self.fs = fs if fs is not None else open_filesystem(self.url, timeout)
        self.root = self.fs._strip_protocol(self.url).rstrip("/")
        self.timeout = timeout
        self.retries = RETRIES if retries is None else retries
        self.backoff = BACKOFF if backoff is None else backoff
        self.sleep = sleep
        self.objects: dict[str, ObjectInfo] = {}
        self.single = False  # the URL names one object, not a prefix

    def list(self) -> dict[str, ObjectInfo]:
        """Every object under the prefix (URL -> size and identity): one listing.  A URL
        naming one object with nothing under it lists as that object alone (`single`)."""
        found = self._call(self.url, lambda: self.fs.find(self.root, detail=True))
        files = {key.rstrip("/"): info for key, info in found.items() if info.get("type", "file") == "file"}
        self.objects = {}
        for key, info in sorted(files.items()):
            if key.startswith(self.root + "/"):
                self.objects[self.url + key[len(self.root):]] = _object_info(info)
        self.single = not self.objects and self.root in files
        if self.single:
            self.objects = {self.url: _object_info(files[self.root])}
        return self.objects

    def discover(self) -> Found:
        """The sources under the prefix (`app.ingest.discover`), from one listing; only
        candidate JSON/CSV logs are read (their first bytes)."""
        objects = self.list()
        if self.single:
            folder, name = posixpath.split(self.root)
            return Found([named_source(root_name(folder), name, self.url)], [])
        start = len(self.url) + 1
        return discover(
            root_name(self.root), [u[start:] for u in objects], lambda rel: f"{self.url}/{rel}",
            lambda url: self.read(url, 0, min(SNIFF_BYTES, objects[url].size)),
        )

    def read(self, url: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object: one range request (retried as the module says)."""
        if end <= start:
            return b""
        return self._call(url, lambda: self.fs.cat_file(self.fs._strip_protocol(url), start=start, end=end))

    def read_whole(self, url: str) -> bytes:
        return self.read(url, 0, self.objects[url].size)

    def changed(self, url: str, size: int, head: str | None) -> bool:
        """Whether an object differs from what was read of it (size and head as stored)."""
        info = self.objects.get(url)
        return info is None or info.size != size or head is None or head[16:] != _digest(info.identity.encode())

    def identity_head(self, url: str) -> str:
        """The head stored for an object read whole (a JSON/CSV log): its identity only."""
        return "-" * 16 + _digest(self.objects[url].identity.encode())

    def read_events(self, url: str, offset: int, tags: _tfrecord.TagTable, head: str | None) -> EventFileRead:
        """The complete records of an event object from `offset` on, as
        `app.ingest.events.read_event_file` reads a local file: `rewritten` says why nothing
        was read when the object is no longer what was read of it."""
        info = self.objects[url]
        decoder = EventDecoder(url, offset, tags)
        tag = _digest(info.identity.encode())
        if offset and info.size < offset:
            return decoder.result(size=info.size, rewritten=f"now {info.size} bytes long, shorter than the {offset} bytes read before")
        if offset and head is not None and head[16:] != tag and info.size == offset:
            return decoder.result(size=info.size, rewritten="its ETag changed while its size did not")
        if offset == info.size and head is not None:
            return decoder.result(size=info.size, head=head)  # the same object: nothing new
        decoder.reserve(info.size - offset)
        at, chunk, window = max(0, offset - SEAM_BYTES), CHUNK_BYTES, b""
        while True:
            end = min(info.size, max(decoder.pos, at) + chunk)
            data = self.read(url, at, end)
            short = len(data) < end - at  # the object changed since it was listed
            if at < offset:  # the first read: check the seam, then decode what follows it
                window, data = data[: offset - at], data[offset - at:]
                if head is not None and _digest(window) != head[:16]:
                    return decoder.result(size=info.size, rewritten="the bytes before the offset read last time changed")
            consumed = decoder.feed(data)
            window = (window + data[:consumed])[-SEAM_BYTES:]
            if decoder.status == _tfrecord.CORRUPT or end >= info.size or short:
                break
            if consumed == 0:  # one record larger than the chunk
                chunk *= 2
            at = decoder.pos
        return replace(decoder.result(size=info.size), head=_digest(window) + tag)

    def _call(self, url: str, request: Callable):
        for attempt in range(self.retries):
            try:
                return bounded(request, self.timeout)
            except Exception as e:  # any backend's failure: classified, retried or reported
                reason, transient = describe_error(e)
                if not transient or attempt == self.retries - 1:
                    raise IngestError(Problem(url, reason if not transient else f"{reason} (after {attempt + 1} attempts)")) from e
                self.sleep(self.backoff * 2**attempt)
        raise AssertionError("unreachable")


def _object_info(info: dict) -> ObjectInfo:
    return ObjectInfo(int(info.get("size") or 0), identity(info))


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()

