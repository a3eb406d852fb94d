"""`Watcher`: post a training loop's values to losswatch without ever harming the loop.

`log()` only appends to an in-memory queue (a few microseconds, no lock, no I/O); a
background thread batches the points by size and time and posts them.  What the service
cannot take (it is down, restarting, overloaded) goes to a spool file on disk and is
replayed in order when it answers again; its ingest is idempotent, so a batch sent twice
(a post whose answer was lost) is stored once.  Nothing is raised into training but the
guard's own `LossAlert`, when asked for; problems are logged once, then rate-limited."""

from __future__ import annotations

import atexit
import collections
import json
import logging
import math
import os
import threading
import time
import urllib.parse
import weakref
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from losswatch_client.alerts import (
    DEFAULT_GUARD_ON,
    AlertChange,
    AlertKey,
    Guard,
    GuardDecision,
    LossAlert,
    changes_from_listing,
    changes_from_response,
    key_of,
)
from losswatch_client.batching import ResumeCuts, batch_ranges, lines_before_resume
from losswatch_client.complaints import Complaints, log
from losswatch_client.settings import RUN_VAR, TOKEN_VAR, URL_VAR, from_env, is_main_process, spool_path
from losswatch_client.spool import Spool, SpoolFull
from losswatch_client.transport import Answer, HttpTransport, Unreachable

Point = Tuple[int, Mapping[str, Any], float]  # step, {tag: value}, wall time
AlertCallback = Callable[[AlertChange], None]

MAX_BACKOFF = 30.0  # seconds between tries while the service is unreachable, at most
SYNC_DELAY = 2.0  # after a deferred analysis, read the run's alerts this long after (the service analyses within ~1-2 s)
MAX_TAKE = 50_000  # points one step of the thread takes from the queue
MAX_BATCH_BYTES = 900_000  # under the service's 1 MiB "heavy request" size: a batch never waits for a slot

_live: "weakref.WeakSet[Watcher]" = weakref.WeakSet()


class Watcher:
    """Posts `log(step, **values)` to `POST {url}/v1/runs/{run}/points` in the background.

    `url`, `run` and `token` default to LOSSWATCH_URL, LOSSWATCH_RUN and LOSSWATCH_TOKEN.
    Without a URL or a run it logs a warning and posts nothing (training goes on).
    `guard`: "warn" (log the alerts that would stop the run), "stop" (`should_stop` becomes
    true: the Hugging Face and Lightning callbacks stop the trainer) or "raise" (the next
    `log()` raises `LossAlert`); `guard_on` lists the kinds (`kind` or
    `kind/classification`) that act, at `guard_severity` or above.  Only rank 0 posts under
    torch.distributed / accelerate (RANK, LOCAL_RANK) unless `all_ranks=True`.
    `finish_on_close`: a clean `close()` (the end of a `with` block left without an
    exception) marks the run finished, so its silence from then on is not taken for a
    crash; a close at interpreter exit or by an exception never does."""

    def __init__(
        self,
        url: Optional[str] = None,
        run: Optional[str] = None,
        token: Optional[str] = None,
        *,
        guard: str = "warn",
        guard_on: Sequence[str] = DEFAULT_GUARD_ON,
        guard_severity: str = "critical",
        flush_interval: float = 1.0,
        batch_size: int = 5000,
        max_queue: int = 1_000_000,
        spool_dir: Optional[str] = None,
        spool_max_bytes: int = 256 << 20,
        timeout: float = 5.0,
        close_timeout: float = 10.0,
        all_ranks: bool = False,
        finish_on_close: bool = True,
        transport: Any = None,
    ) -> None:
        self.guard = Guard(guard, tuple(guard_on), guard_severity)
        self.url = from_env(url, URL_VAR)
        self.run = from_env(run, RUN_VAR)
        self.flush_interval, self.batch_size, self.max_queue = flush_interval, batch_size, max_queue
        self.close_timeout = close_timeout
        self.finish_on_close = finish_on_close
        self._complaints = Complaints()
        self._callbacks: List[AlertCallback] = []
        self._alerts: Dict[str, AlertChange] = {}  # alert id -> its latest change
        self._known: Dict[str, AlertKey] = {}
        self._started_at = time.time()
        self._queue: Deque[Point] = collections.deque()
        self._raise: Optional[LossAlert] = None
        self._last_step: Optional[int] = None
        self.dropped = 0  # points lost: the queue or the spool was full, or the service refused them for good
        self._active = False
        if not (self.url and self.run):
            missing = " and ".join(n for n, v in (("URL (url= or LOSSWATCH_URL)", self.url), ("run (run= or LOSSWATCH_RUN)", self.run)) if not v)
            log.warning("losswatch: no %s given: nothing will be posted", missing)
            return
        if not (all_ranks or is_main_process()):
            return  # another rank posts; this one only keeps the guard's API working
        self._transport = transport or HttpTransport(self.url, from_env(token, TOKEN_VAR), timeout)
        self._spool_path = spool_path(self.url, self.run, spool_dir)
        self._spool_max_bytes = spool_max_bytes
        self._spool: Optional[Spool] = None
        self._open_spool()
        self._start()

    # --- the training loop's side: cheap, never raises but the guard's LossAlert ------------

    def log(self, step: int, **values: Any) -> None:
        """Queue `values` (tag=value) at `step`; non-finite values are sent as they are."""
        if self._raise is not None:
            self._raise_now()
        if self._active:
            self._put(step, values)

    def log_dict(self, step: int, values: Mapping[str, Any]) -> None:
        """As `log`, for tags that are not Python names (`"train/loss"`)."""
        if self._raise is not None:
            self._raise_now()
        if self._active:
            self._put(step, dict(values))

    def _put(self, step: int, values: Mapping[str, Any]) -> None:
        queue = self._queue
        if len(queue) >= self.max_queue:
            self.dropped += len(values)
            self._complaints.say("queue", f"the queue holds {self.max_queue} points not yet sent: dropping the newest")
            return
        queue.append((step, values, time.time()))
        self._last_step = step
        if len(queue) == self.batch_size:
            self._wake.set()

    def _raise_now(self) -> None:
        error, self._raise = self._raise, None
        raise error

    @property
    def should_stop(self) -> bool:
        """True once the guard (`guard="stop"`) decided the run should stop."""
        decision = self.guard.decision
        return decision is not None and decision.policy == "stop"

    @property
    def decision(self) -> Optional[GuardDecision]:
        """Why the guard acted (alert, its step, the last logged step), or None."""
        return self.guard.decision

    @property
    def alerts(self) -> List[AlertChange]:
        """Every alert the service reported for this run, each as its latest change."""
        return list(self._alerts.values())

    def on_alert(self, callback: AlertCallback) -> AlertCallback:
        """Call `callback(change)` for every alert change (from the watcher's thread; what
        it raises is logged, not propagated).  Usable as a decorator."""
        self._callbacks.append(callback)
        return callback

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Send what is queued now; True when everything logged so far was delivered."""
        if not self._active:
            return not self._queue
        done = threading.Event()
        with self._requests_lock:
            self._flush_requests.append(done)
        self._wake.set()
        return done.wait(self.close_timeout if timeout is None else timeout) and self._delivered_all()

    def finish(self, timeout: Optional[float] = None) -> bool:
        """Flush, then mark the run finished (`POST /v1/runs/{run}/finish`): the job ended
        normally, so the service does not take its silence for a crash (a `stale` alert).
        The watcher stays usable: a point logged later makes the run running again.  True
        when the service marked it (within `timeout`); otherwise a warning says why, but for
        a watcher that never delivered a point: the service has no run to finish."""
        if not self._active:
            return False
        deadline = time.monotonic() + (self.close_timeout if timeout is None else timeout)
        if not self.flush(timeout):
            self._not_finished("some of its points are not delivered yet")
            return False
        return self._post_finish(deadline)

    def close(self, timeout: Optional[float] = None, finished: Optional[bool] = None) -> None:
        """Send what is left within `timeout` (default `close_timeout`); what could not be
        sent stays in the spool file, and a warning says where.  Then, when `finished`
        (default `finish_on_close`) and every point was delivered, mark the run finished
        as `finish()` does.  Interpreter exit and a `with` block left by an exception
        close with `finished=False`: a job that dies is what the stale alert is for."""
        if not self._active:
            return
        deadline = time.monotonic() + (self.close_timeout if timeout is None else timeout)
        self._active = False
        self._closing = True
        self._wake.set()
        self._thread.join(self.close_timeout if timeout is None else timeout)
        delivered = not self._thread.is_alive()
        with self._io:  # the sender's step is over, or it hangs in a request: keep what it held
            # (the points its step took go first; any it had sent already are sent again, and
            # stored once; a replay from the spool leaves the spool as it was)
            left = self._encode(self._taken)[0] + self._encode(self._take_queue())[0]
            self._taken = []
            delivered = delivered and not left and not self._spool_pending()
            if left:
                self._to_spool(left)
            self._closed = True
            if self._spool is not None:
                if self._spool.pending:
                    log.warning(
                        "losswatch: %d bytes of points for run %r could not be sent to %s; they are in %s and are sent "
                        "by the next watcher of this run, or post them: curl --data-binary @%s -H 'Content-Type: "
                        "application/x-ndjson' %s/v1/runs/%s/points",
                        self._spool.size, self.run, self.url, self._spool.path, self._spool.path, self.url.rstrip("/"),
                        urllib.parse.quote(self.run, safe=""),
                    )
                self._spool.close()
                self._spool = None
        _live.discard(self)
        if self.finish_on_close if finished is None else finished:
            if delivered:
                self._post_finish(deadline)
            else:
                self._not_finished("some of its points are not delivered yet")

    def _post_finish(self, deadline: float) -> bool:
        """`POST /v1/runs/{run}/finish` within what is left until `deadline`; a watcher that
        never delivered a point has no run to finish and posts nothing."""
        if not self._posted:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            self._not_finished("no time was left (close_timeout)")
            return False
        try:
            answer = self._transport.finish_run(self.run, left)
        except Unreachable as e:
            self._not_finished(f"cannot reach {self.url}: {e}")
            return False
        except Exception as e:  # a transport's defect (one without finish_run) must not reach training
            self._not_finished(f"unexpected error: {e!r}")
            return False
        if not answer.ok:
            self._not_finished(f"the service answered {answer.error_message()}")
            return False
        body = answer.body if isinstance(answer.body, dict) else {}
        self._report(changes_from_response(body))
        return True

    def _not_finished(self, why: str) -> None:
        log.warning("losswatch: run %r is not marked finished: %s; a stale alert fires if it stays silent", self.run, why)

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(finished=None if exc_type is None else False)

    def __getstate__(self) -> Dict[str, Any]:
        raise TypeError("a Watcher cannot be pickled: create one in the process that trains (rank 0)")

    # --- the background thread ---------------------------------------------------------

    def _start(self) -> None:
        self._wake = threading.Event()
        self._io = threading.Lock()  # the spool and the points in flight
        self._flush_requests: List[threading.Event] = []
        self._requests_lock = threading.Lock()
        self._closing = False
        self._backoff, self._retry_at, self._sync_at = 0.0, 0.0, None
        self._cuts = ResumeCuts()
        self._taken: List[Point] = []
        self._closed = False
        self._tag_json: Dict[str, str] = {}
        self._posted = False  # a batch was delivered: the service has this run to finish
        self._pid = os.getpid()
        self._active = True
        self._thread = threading.Thread(target=self._run, name=f"losswatch {self.run}", daemon=True)
        self._thread.start()
        _live.add(self)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            closing = self._closing
            with self._requests_lock:
                requests, self._flush_requests = self._flush_requests, []
            try:
                self._step(force=closing or bool(requests))
            except Exception as e:  # a defect here must never end the watcher, let alone training
                self._complaints.say("defect", f"unexpected error in the watcher's thread: {e!r}", logging.ERROR)
            for request in requests:
                request.set()
            if closing:
                return

    def _step(self, force: bool) -> None:
        self._taken = self._take_queue()  # until sent or spooled: close() keeps them if this step hangs
        lines, cuts = self._encode(self._taken)
        now = time.monotonic()
        with self._io:
            if lines and (self._spool_pending() or now < self._retry_at):
                self._to_spool(lines)
                lines = []
        if force or now >= self._retry_at:
            self._replay_spool()
            with self._io:
                pending = self._spool_pending()
            for start, end in batch_ranges(len(lines), cuts, self.batch_size):
                if pending or not self._send(lines[start:end]):
                    pending = True
                    with self._io:
                        self._to_spool(lines[start:])
                    break
        self._taken = []
        if self._sync_at is not None and time.monotonic() >= self._sync_at:
            self._sync_alerts()

    def _take_queue(self) -> List[Point]:
        """Up to MAX_TAKE points: a step stays short, so close() rarely waits on one."""
        queue, taken = self._queue, []
        for _ in range(min(len(queue), MAX_TAKE)):
            taken.append(queue.popleft())
        if queue:
            self._wake.set()
        return taken

    def _encode(self, points: List[Point]) -> Tuple[List[bytes], List[int]]:
        """NDJSON records `{"step", "tag", "value", "wall_time"}` (NaN and Infinity as such),
        and the indices where a resume starts (see batching.py)."""
        lines: List[bytes] = []
        cuts: List[int] = []
        for step, values, wall_time in points:
            for tag, value in values.items():
                try:
                    number, step = _json_number(float(value)), int(step)
                except (TypeError, ValueError, OverflowError) as e:
                    self.dropped += 1
                    self._complaints.say(f"value:{tag}", f"{tag!r} at step {step} is not a number ({e}): not sent")
                    continue
                name = self._tag_json.get(tag)
                if name is None:
                    name = self._tag_json[tag] = json.dumps(str(tag))
                if self._cuts.rewinds(tag, step):
                    cuts.append(len(lines))
                lines.append(f'{{"step": {step}, "tag": {name}, "value": {number}, "wall_time": {wall_time!r}}}\n'.encode())
        return lines, cuts

    def _spool_pending(self) -> bool:
        return self._spool is not None and self._spool.pending

    def _replay_spool(self) -> None:
        """Send the spool from its front, in order, until it is empty or a post fails."""
        while True:
            with self._io:
                if not self._spool_pending():
                    return
                lines, end = self._spool.peek(self.batch_size)
                take = lines_before_resume(lines)
                end -= sum(map(len, lines[take:]))
                lines = lines[:take]
            if lines and not self._send(lines):
                return
            with self._io:
                self._spool.advance(end)

    def _send(self, lines: List[bytes]) -> bool:
        """Post one batch (split while over the size limits); False: keep it and retry later."""
        if sum(map(len, lines)) > MAX_BATCH_BYTES and len(lines) > 1:
            half = len(lines) // 2
            return self._send(lines[:half]) and self._send(lines[half:])
        try:
            answer = self._transport.post_points(self.run, b"".join(lines))
        except Unreachable as e:
            return self._failed(f"cannot reach {self.url}: {e}", None)
        if answer.status == 413 and len(lines) > 1:
            half = len(lines) // 2
            return self._send(lines[:half]) and self._send(lines[half:])
        if answer.refused_for_good:
            self.dropped += len(lines)
            self._complaints.say("refused", f"the service refused {len(lines)} points for good ({answer.error_message()})", logging.ERROR)
            return True
        if not answer.ok:
            return self._failed(f"the service answered {answer.error_message()}", answer.retry_after)
        self._delivered(answer)
        return True

    def _failed(self, why: str, retry_after: Optional[float]) -> bool:
        self._backoff = min(MAX_BACKOFF, max(0.5, self._backoff * 2))
        self._retry_at = time.monotonic() + (retry_after if retry_after is not None else self._backoff)
        self._complaints.say("unreachable", f"{why}; keeping the points in {self._spool_path} and retrying")
        return False

    def _delivered(self, answer: Answer) -> None:
        self._posted = True
        if self._backoff:
            log.warning("losswatch: %s answers again: sending the points kept meanwhile", self.url)
            self._complaints.forget("unreachable")
        self._backoff, self._retry_at = 0.0, 0.0
        body = answer.body if isinstance(answer.body, dict) else {}
        for rejected in body.get("rejected") or ():
            self._complaints.say(f"rejected:{rejected.get('reason')}", f"the service rejected a point: {rejected.get('reason')}")
        if body.get("analysis") == "deferred" and self._sync_at is None:
            self._sync_at = time.monotonic() + SYNC_DELAY
        self._report(changes_from_response(body))

    def _sync_alerts(self) -> None:
        """The run was analysed in the background: read its alerts and report what changed."""
        try:
            answer = self._transport.run_alerts(self.run)
        except Unreachable:
            self._sync_at = time.monotonic() + SYNC_DELAY
            return
        self._sync_at = None
        if answer.ok:
            self._report(changes_from_listing(answer.body, self._known, self._started_at))

    def _report(self, changes: List[AlertChange]) -> None:
        fresh = [c for c in changes if self._known.get(c.id) != key_of(c)]
        for change in fresh:
            self._known[change.id] = key_of(change)
            self._alerts[change.id] = change
            log.info("losswatch: %s", change.describe())
            for callback in list(self._callbacks):
                try:
                    callback(change)
                except Exception as e:
                    self._complaints.say("callback", f"an on_alert callback raised {e!r}", logging.ERROR)
        decision = self.guard.consider(fresh, self._last_step)
        if decision is not None:
            log.warning("losswatch: %s", decision.describe())
            if decision.policy == "raise":
                self._raise = LossAlert(decision)

    def _to_spool(self, lines: List[bytes]) -> None:
        """Keep lines on disk (caller holds `_io`); a full or broken spool drops them, loudly."""
        if self._spool is None:
            if self._closed:
                return  # close() kept them already (a step that outlived close_timeout)
            self.dropped += len(lines)
            self._complaints.say("nospool", f"no spool file: {len(lines)} points could not be kept", logging.ERROR)
            return
        try:
            self._spool.append(lines)
        except SpoolFull as e:
            self.dropped += e.args[0]
            self._complaints.say(
                "spoolfull", f"the spool {self._spool.path} is full ({self._spool.size} bytes, spool_max_bytes): "
                f"{e.args[0]} points were dropped; they are lost unless the service comes back", logging.ERROR,
            )
        except OSError as e:
            self.dropped += len(lines)
            self._complaints.say("spoolio", f"cannot write the spool {self._spool.path}: {e}: {len(lines)} points dropped", logging.ERROR)

    def _open_spool(self) -> None:
        try:
            self._spool = Spool(self._spool_path, self._spool_max_bytes)
        except OSError as e:
            log.error("losswatch: cannot open the spool %s (%s): points the service cannot take will be lost", self._spool_path, e)
            return
        self._spool_path = self._spool.path
        if self._spool.leftover_points:
            log.warning("losswatch: sending %d points an earlier process left in %s", self._spool.leftover_points, self._spool.path)

    def _delivered_all(self) -> bool:
        return not self._queue and not self._spool_pending()

    def _after_fork(self) -> None:
        """In a forked child (a DataLoader worker): post nothing, keep nothing of the parent's.
        Its queue is the parent's to send, its spool the parent's file, its thread is gone."""
        self._active = False
        self._queue = collections.deque()
        self._io = threading.Lock()
        if self._spool is not None:
            self._spool.detach()
            self._spool = None
        _live.discard(self)


def _json_number(value: float) -> str:
    """A float as the service reads it: shortest round-trip digits, NaN and Infinity by name."""
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _close_all() -> None:
    for watcher in list(_live):
        watcher.close(finished=False)  # exiting is no proof the job ended well: it may be a crash


def _forked() -> None:
    for watcher in list(_live):
        watcher._after_fork()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
