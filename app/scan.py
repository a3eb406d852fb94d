"""One scan: read what is new under each path, re-analyse the runs that changed, move their
alerts along their lifecycle, judge every quiet run of those paths for staleness
(`app.liveness`) and queue what must be delivered.

Runs are stored in batches (of event-file runs: at most BATCH_RUNS runs and about
BATCH_POINTS new points), one transaction per batch, holding the batch's row locks: each
run's new points, the offsets they were read up to, its alerts and their changes, and the
outbox of deliveries commit together.  A cron tick over thousands of runs then pays one
commit and one read of offsets per batch, not per run.  A scan killed at any instant
leaves every run either as before or fully updated, and two scans at once take turns on a
run, the second finding nothing new.  What a scan reports is what its own transactions
changed, so nothing is reported twice.  A run whose analysis fails is a problem of that
run, recorded in the batch's transaction: the others go on.

Nothing that touches the logdir runs inside a write transaction: a batch's files are read
first (from the offsets one read transaction finds), then its write transaction locks the
runs (in (source, name) order, so two scans' batches never wait on each other in a cycle)
and checks that each run's offsets are still those, i.e. that no other scan stored the run
meanwhile.  If one did, that run's read is dropped: the other scan stored what it found,
and what is newer is read next time.  A FIFO or a hung filesystem in a logdir can then hold
up the scan of that file at most (see `app.ingest.files`), and never the store's write lock.

The command line prints what a scan changed after its last commit; a scan killed before
printing leaves its changes held (`app.store.reports`), and the next scan prints them first.

With `jobs` > 1 the runs are shared among processes (`app.scan_jobs`), and each analyses a
batch in a read transaction after the one that stored it, applying the analyses in a third:
on SQLite's one write lock, a process analyses while another stores.  A run stored but not
yet analysed says so (`dirty_since`), and every scan ends by analysing such runs of its
paths: a scan stopped in between leaves their analysis to the next.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import httpx

from analyzers.config import AnalysisConfig
from app import scan_jobs
from app.alerts.lifecycle import AlertRecord
from app.alerts.webhooks import DeliveryConfig, DeliveryReport, deliver_due, resend_firing
from app.ingest.discover import TEXT_SUFFIXES, Source, discover_local
from app.ingest.files import READ_TIMEOUT, read_whole, under_roots
from app.ingest.logdir import Run, RunState, is_event_file, read_run
from app.ingest.problems import IngestError, Problem
from app.ingest.remote import RemoteLogdir, is_url, normalize, url_contains
from app.ingest.restarts import assign_segments
from app.ingest.sources import check_file, read_text_source, run_name_for_file
from app.ingest.textlogs import parse_text_log
from app.store import alerts as stored_alerts
from app.store import reports
from app.store import runs as stored_runs
from app.store.db import Store
from app.store.runs import StoredFile
from app.updates import (
    Applied,
    Assessment,
    Reported,
    Storing,
    alerts_to_evaluate,
    analyze_apart,
    analyze_locked,
    apply,
    assess_batch,
    check_liveness,
    store_points,
    store_points_of_runs,
)

REPORT_LEASE = 15 * 60.0  # a scan on another host that holds changes this long without a commit is taken for dead
DELIVERY_BUDGET = 10.0  # seconds a scan may spend delivering, after its own work
OUTSIDE_ROOTS = "resolves outside the allowed roots (a symlink?): not scanned"
BATCH_RUNS = 64  # runs stored per transaction: a commit per run was a tenth of a cron tick
BATCH_POINTS = 16_384  # new points read before they are stored (bounds a batch's memory and work)
PARALLEL_RUNS = 2 * BATCH_RUNS  # fewer changed runs are scanned in one process: a child takes ~1 s to start


@dataclass
class ScanOutcome:
    runs: int = 0  # runs seen
    changed: int = 0  # runs that had something new
    points: int = 0  # points stored
    events: list[Reported] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    deliveries: DeliveryReport = field(default_factory=lambda: DeliveryReport(0, []))
    earlier: int = 0  # the first `earlier` events were left unprinted by an earlier scan
    empty: list[str] = field(default_factory=list)  # paths under which no source was found
    failed: list[str] = field(default_factory=list)  # paths that could not be listed (in `problems`)

    def merge(self, share: ScanOutcome) -> None:
        """Add what another process's share of the scan did (its runs, points and changes)."""
        self.changed += share.changed
        self.points += share.points
        self.events += share.events
        self.problems += share.problems


@dataclass(frozen=True)
class Reporter:
    """A scan that prints its changes (the command line), named by its claim on the changes
    it holds until they are printed: host, process id and a random part."""

    claim: str

    @classmethod
    def new(cls) -> Reporter:
        return cls(f"{_host()}/{os.getpid()}/{secrets.token_hex(8)}")


@dataclass(frozen=True)
class _Options:
    config: AnalysisConfig
    webhooks: Sequence[str]
    clock: Callable[[], float]
    roots: Sequence[str] | None
    timeout: float
    reporter: Reporter | None
    apart: bool = False  # analyse outside the transaction that stores (several processes scan)


@dataclass(frozen=True)
class _Target:
    """One run to bring up to date: where it lives and which files hold it."""

    source: str
    name: str
    files: list[str]
    text: bool = False  # a JSON/CSV log, re-read whole when it changes
    found: Source | None = None  # how a walk found it (a JSON/CSV log's runs are named from it)
    remote: RemoteLogdir | None = None  # the listing of the prefix that holds it, which reads it


def scan(
    store: Store,
    paths: list[str],
    *,
    config: AnalysisConfig = AnalysisConfig(),
    webhooks: Sequence[str] = (),
    client: httpx.Client | None = None,
    clock: Callable[[], float] = time.time,
    progress: Callable[[int, int], None] | None = None,
    roots: Sequence[str] | None = None,
    timeout: float = READ_TIMEOUT,
    reporter: Reporter | None = None,
    delivery: DeliveryConfig = DeliveryConfig(),
    budget: float | None = DELIVERY_BUDGET,
    jobs: int = 1,
) -> ScanOutcome:
    """Scan every path; raises IngestError for a local path that does not exist or lies
    outside `roots`.  A URL prefix that cannot be listed is a problem (in `failed`), and the
    other paths are still scanned; a path under which no source is found is in `empty`.

    A path inside a directory also given is left out (its runs would be stored twice) and
    said so.  `roots`: the service's allowed roots, checked for each path (IngestError when
    it resolves outside them) and for every file at every scan; None (the command line)
    restricts nothing.  `timeout` bounds each call on a file.  With a `reporter`, the
    changes stay held until `printed`, and the changes an earlier scan of these runs
    committed but never printed come first in the outcome.  With a `client`, what is due
    in the outbox is delivered once the scan's own work is done, within `budget` seconds
    (None: no limit), and Alertmanager receivers are told again of what still fires.

    `jobs` > 1 shares the runs to read among that many processes (this one and children,
    each with its own connection) once at least PARALLEL_RUNS event-file runs changed:
    see the module.
    """
    options = _Options(config, webhooks, clock, roots, timeout, reporter)
    outcome = ScanOutcome()
    targets: list[_Target] = []
    for path in _outermost(paths, outcome.problems):
        try:
            found, problems = _targets(path, roots, timeout)
        except IngestError as e:
            if not is_url(path):
                raise
            outcome.problems += e.problems
            outcome.failed.append(path)
            continue
        if not found:
            outcome.empty.append(path)
        targets += found
        outcome.problems += problems
    outcome.runs = len(targets)
    sources = sorted({t.source for t in targets})
    if reporter is not None:
        outcome.events = _take_over(store, sources, reporter, clock())
        outcome.earlier = len(outcome.events)
    with store.read() as conn:
        known = {source: stored_runs.known_files(conn, source) for source in sources}
    counted = _Progress(len(targets), progress)
    pending = []
    for target in targets:
        if _changed(target, known[target.source].get(target.name, {})):
            pending.append(target)
        else:
            counted.one()
    shares = _shares(pending, jobs)
    if len(shares) > 1:
        options = replace(options, apart=True)
        for done in scan_jobs.scan_shares(store, _scan_share, shares, options, counted.add, _stopped(shares)):
            outcome.merge(done)
    else:
        _scan_targets(store, pending, options, outcome, counted)
    _analyse_owed(store, sources, options, outcome)
    outcome.events += check_liveness(store, config, webhooks, clock(), sources, hold=_holder(options))
    if client is not None:
        outcome.deliveries = _deliver(store, client, webhooks, delivery, clock, budget)
    return outcome


def _shares(targets: list[_Target], jobs: int) -> list[list[_Target]]:
    """The runs to read, split among `jobs` processes: local event-file runs by a hash of
    (source, name), so a run is read by one process only; text logs and objects in
    storage (read through this process's clients) stay in the first share, this process's."""
    local = [t for t in targets if not t.text and t.remote is None]
    if jobs <= 1 or len(local) < PARALLEL_RUNS:
        return [targets]
    shares: list[list[_Target]] = [[t for t in targets if t.text or t.remote is not None]] + [[] for _ in range(jobs - 1)]
    for t in local:
        shares[share_of(t.source, t.name, jobs)].append(t)
    return shares


def share_of(source: str, name: str, jobs: int) -> int:
    """Which of `jobs` processes reads a local event-file run (the same in every scan)."""
    return zlib.crc32(f"{source}\0{name}".encode()) % jobs


def _stopped(shares: list[list[_Target]]) -> Callable[[int, BaseException], ScanOutcome]:
    """What a scan says of a child process that died before its share was done."""
    def outcome(index: int, error: BaseException) -> ScanOutcome:
        return ScanOutcome(problems=[Problem("scan", f"a scan process stopped ({error}); of its {len(shares[index]):,} "
                                             "runs, those it had not stored are read by the next scan")])
    return outcome


def _scan_share(store: Store, targets: list[_Target], options: _Options, progress: Callable[[int], None]) -> ScanOutcome:
    """One process's share of a scan (`app.scan_jobs`): its outcome, progress told a run at a time."""
    outcome = ScanOutcome()
    _scan_targets(store, targets, options, outcome, _Progress(len(targets), lambda done, _: progress(1)))
    return outcome


def _scan_targets(store: Store, targets: list[_Target], options: _Options, outcome: ScanOutcome, counted: _Progress) -> None:
    """Bring these runs up to date: event-file runs in batches, each text log on its own."""
    batch: dict[tuple[str, str], _Target] = {}
    for target in targets:
        # A text log is stored on its own, after the runs found before it; a run already in
        # the batch (a folder named as the logdir itself) is read again once that is stored.
        if target.text or len(batch) == BATCH_RUNS or (target.source, target.name) in batch:
            _scan_runs(store, list(batch.values()), options, outcome, counted)
            batch = {}
        if target.text:
            _scan_text(store, target, options, outcome)
            counted.one()
        else:
            batch[target.source, target.name] = target
    _scan_runs(store, list(batch.values()), options, outcome, counted)


def _deliver(store: Store, client: httpx.Client, webhooks: Sequence[str], delivery: DeliveryConfig,
             clock: Callable[[], float], budget: float | None) -> DeliveryReport:
    """The outbox first, then Alertmanager's refresh, both within the one budget."""
    started = time.monotonic()
    sent = deliver_due(store, client, delivery, clock=clock, budget=budget)
    left = None if budget is None else max(0.0, budget - (time.monotonic() - started))
    if left == 0.0:
        return sent
    again = resend_firing(store, client, webhooks, delivery, budget=left)
    return DeliveryReport(sent.delivered, sent.failed + again.failed)


def printed(store: Store, reporter: Reporter) -> None:
    """The reporter printed its changes: let go of them."""
    with store.write() as conn:
        reports.release(conn, reporter.claim)


def open_alerts(store: Store, paths: list[str]) -> list[AlertRecord]:
    """Every pending or firing alert of the runs under these paths."""
    with store.read() as conn:
        return stored_alerts.open_alerts(conn, [_source(p) for p in paths])


def _source(path: str) -> str:
    return normalize(path) if is_url(path) else os.path.realpath(path)


def _outermost(paths: list[str], problems: list[Problem]) -> list[str]:
    """The paths less those inside a directory also given (each run is scanned once, under
    the outermost path), with a note for each left out.  Files the walk would not consider
    (not an event file nor a JSON/CSV name) are never left out."""
    real = [_source(p) for p in paths]
    keep = []
    for i, path in enumerate(paths):
        covers = [j for j in range(len(paths)) if j != i and _is_dir(real[j]) and _inside(real[i], real[j])
                  and (real[i] != real[j] or j < i)]
        walked = is_event_file(os.path.basename(real[i])) or real[i].endswith(TEXT_SUFFIXES)
        if not covers or not (_is_dir(real[i]) or walked):
            keep.append(path)
            continue
        outer = paths[min(covers, key=lambda j: (len(real[j]), j))]
        what = "the same directory as" if real[i] == _source(outer) else "inside"
        problems.append(Problem(path, f"{what} {outer}, also given: its runs are scanned once, under {outer}"))
    return keep


def _is_dir(path: str) -> bool:
    """A local directory, or a URL (always a prefix)."""
    return is_url(path) or os.path.isdir(path)


def _inside(path: str, directory: str) -> bool:
    if is_url(path) or is_url(directory):
        return is_url(path) and is_url(directory) and url_contains(directory, path)
    return os.path.commonpath([path, directory]) == directory


def allowed_source(source: str, roots: Sequence[str]) -> bool:
    """Whether a path or URL (resolved, see `_source`) lies under one of the allowed roots;
    a URL only under a URL root, a path only under a directory."""
    if is_url(source):
        return any(is_url(root) and url_contains(root, source) for root in roots)
    return under_roots(source, [root for root in roots if not is_url(root)])


def _targets(path: str, roots: Sequence[str] | None, timeout: float) -> tuple[list[_Target], list[Problem]]:
    source = _source(path)
    if roots is not None and not allowed_source(source, roots):
        raise IngestError(Problem(path, OUTSIDE_ROOTS))
    if is_url(path):
        remote = RemoteLogdir(source, timeout=timeout)
        found = remote.discover()
        return [_Target(source, s.name, list(s.files), s.text, s, remote) for s in found.sources], found.problems
    if os.path.isdir(path):
        found = discover_local(source, roots, timeout)
        return [_Target(source, s.name, list(s.files), s.text, s) for s in found.sources], found.problems
    check_file(path)
    if is_event_file(os.path.basename(path)):
        return [_Target(source, os.path.basename(os.path.dirname(source)) or ".", [source])], []
    return [_Target(source, run_name_for_file(source), [source], text=True)], []


def _changed(target: _Target, known: dict[str, StoredFile]) -> bool:
    """Whether any file of the run grew (or appeared) since it was last read; an object in
    storage is judged from the listing (size and ETag), with no request of its own."""
    for path in target.files:
        if target.remote is not None:
            stored = known.get(path)
            if stored is None or target.remote.changed(path, stored.size, stored.head):
                return True
            continue
        try:
            size = os.stat(path).st_size
        except OSError:
            return True  # let the read report it
        if path not in known or known[path].size != size:
            return True
    return False


@dataclass
class _Progress:
    """Runs looked at so far, told to `report` (a run to read counts once read)."""

    total: int
    report: Callable[[int, int], None] | None
    done: int = 0

    def one(self) -> None:
        self.add(1)

    def add(self, runs: int) -> None:
        self.done += runs
        if self.report:
            self.report(self.done, self.total)


@dataclass(frozen=True)
class _Read:
    """What a run's files held past the offsets a read transaction found (`files`)."""

    target: _Target
    files: dict[str, StoredFile]
    read: Run
    progress: dict[str, StoredFile]  # the offsets to store with its points


def _scan_runs(store: Store, targets: list[_Target], options: _Options, outcome: ScanOutcome, counted: _Progress) -> None:
    """Read these event-file runs' new bytes, then store them a batch at a time (a new
    batch once BATCH_POINTS points are read)."""
    if not targets:
        return
    with store.read() as conn:
        stored = {source: stored_runs.run_states(conn, source, [t.name for t in targets if t.source == source])
                  for source in {t.source for t in targets}}
        files = stored_runs.files_of_runs(conn, [run_id for named in stored.values() for run_id, _ in named.values()])
    reads: list[_Read] = []
    points = 0
    for target in targets:
        before = stored[target.source].get(target.name)
        read = _read_new(target, before[1] if before else None, files.get(before[0], {}) if before else {}, options, outcome)
        counted.one()
        if read is None:
            continue
        reads.append(read)
        points += len(read.read.points)
        if points >= BATCH_POINTS:
            _store_reads(store, reads, options, outcome)
            reads, points = [], 0
    _store_reads(store, reads, options, outcome)


def _read_new(target: _Target, state: RunState | None, files: dict[str, StoredFile], options: _Options,
              outcome: ScanOutcome) -> _Read | None:
    """A run's files read from their stored offsets (`state`: the stored run's reading state,
    None for a new run); None when nothing moved."""
    read = read_run(
        target.name, target.files, {p: f.offset for p, f in files.items()}, state,
        heads={p: f.head for p, f in files.items()}, roots=options.roots, timeout=options.timeout,
        reader=target.remote.read_events if target.remote is not None else None,
    )
    outcome.problems += read.problems
    progress = {path: StoredFile(p.offset, p.size, p.end.value, p.head) for path, p in read.files.items()}
    if not read.rewritten:
        progress = {path: f for path, f in progress.items() if files.get(path) != f}
        if not progress:
            return None
    return _Read(target, files, read, progress)


def _store_reads(store: Store, reads: list[_Read], options: _Options, outcome: ScanOutcome) -> None:
    """Store and analyse these runs' reads in one transaction: the runs locked in one
    statement per source, their points stored with the statements of one run's, then each
    analysed."""
    if not reads:
        return
    now = options.clock()
    reads = sorted(reads, key=lambda r: (r.target.source, r.target.name))
    with store.write() as conn:
        locked = {}
        for source in dict.fromkeys(r.target.source for r in reads):  # in (source, name) order
            names = [r.target.name for r in reads if r.target.source == source]
            locked |= {(source, name): run for name, run in stored_runs.lock_runs(conn, source, names, now).items()}
        files = stored_runs.files_of_runs(conn, [run.id for run in locked.values()])
        # another scan stored a run since it was read: see the module
        current = [(r, locked[r.target.source, r.target.name]) for r in reads]
        current = [(r, run) for r, run in current if files.get(run.id, {}) == r.files]
        storing = [_storing(conn, run, r, now, options.apart) for r, run in current]
        stored = list(zip((r.read for r, _ in current), store_points_of_runs(conn, storing)))
        analysed = [run for read, run in stored if len(read.points) or read.rollbacks or read.rewritten]
        for read, _ in stored:
            outcome.changed += 1
            outcome.points += len(read.points)
        if not options.apart and analysed:
            _apply_all(conn, assess_batch(conn, analysed, options.config), options, now, outcome)
    if options.apart:
        _analyse_apart(store, analysed, options, outcome)


def _storing(conn, run: stored_runs.StoredRun, r: _Read, now: float, owed: bool) -> Storing:
    """A run's read made ready to store with the others of its batch: its new offsets saved,
    and its stored points and files dropped first if it was read again from the start;
    `owed`: its analysis comes in a later transaction, and the run says so until then."""
    read = r.read
    if read.rewritten:  # the run was read again from the start: its points are replaced
        stored_runs.delete_points(conn, run.id)
        stored_runs.delete_files(conn, run.id)
        run = replace(run, last_step=None, points=0, analyzed_points=None)
    stored_runs.save_files(conn, run.id, r.progress)
    return Storing(run, read.points, read.segment, read.rollbacks, read.state, now, dirty=owed)


def _scan_text(store: Store, target: _Target, options: _Options, outcome: ScanOutcome) -> None:
    """A JSON/CSV log changed: read it whole and replace what its runs held."""
    path = target.files[0]
    try:
        data = target.remote.read_whole(path) if target.remote else read_whole(path, options.roots, options.timeout)
    except IngestError as e:
        outcome.problems += e.problems
        return
    if target.found is not None:
        runs, problems = read_text_source(target.found, data)
    else:
        parsed = parse_text_log(data, source=path, run=target.name)
        runs, problems = parsed.runs, parsed.problems
    outcome.problems += problems
    head = target.remote.identity_head(path) if target.remote else None
    now = options.clock()
    for name, points in runs.items():
        with store.write() as conn:
            run = stored_runs.lock_run(conn, target.source, name, now)
            stored = stored_runs.run_files(conn, run.id).get(path, StoredFile(0, -1, ""))
            if (stored.size, stored.head) == (len(data), head):
                continue  # another scan got here first
            segment, rollbacks, segments = assign_segments(points, [(0, path)])
            stored_runs.delete_points(conn, run.id)
            stored_runs.save_files(conn, run.id, {path: StoredFile(len(data), len(data), "complete", head)})
            fresh = replace(run, last_step=None, points=0, analyzed_points=None)
            updated = store_points(conn, fresh, points, segment, tuple(rollbacks), RunState(segments), now)
            outcome.changed += 1
            outcome.points += len(points)
            _reassess(conn, updated, options, now, outcome)


def _holder(options: _Options) -> Callable[[object, list[Reported]], None] | None:
    """What keeps a scan's stale changes held until printed, as `_reassess` does its others."""
    reporter = options.reporter
    if reporter is None:
        return None
    return lambda conn, changes: reports.hold(conn, [e.id for e in changes], reporter.claim, options.clock() + REPORT_LEASE)


def _reassess(conn, run: stored_runs.StoredRun, options: _Options, now: float, outcome: ScanOutcome) -> None:
    """Re-analyse the run (as `store_points` left it, locked) in the caller's transaction; a
    reporter holds the changes until printed.  A failed analysis is a problem of that run:
    the scan goes on with the next."""
    _record(conn, run, analyze_locked(conn, run, options.config, options.webhooks, now), options, now, outcome)


def _apply_all(conn, assessed: list[tuple[stored_runs.StoredRun, Assessment]], options: _Options, now: float,
               outcome: ScanOutcome) -> None:
    """Apply a batch's analyses (each run: its row as locked in `conn`), the alerts their
    evaluations need read in one query; as `_reassess` does, run by run."""
    alerts = alerts_to_evaluate(conn, assessed)
    for run, assessment in assessed:
        _record(conn, run, apply(conn, run, assessment, options.webhooks, now, options.config, alerts[run.id]), options, now, outcome)


def _analyse_apart(store: Store, runs: list[stored_runs.StoredRun], options: _Options, outcome: ScanOutcome) -> None:
    """Analyse stored runs in a read transaction (no write lock held: another process
    stores meanwhile), then apply the analyses in one transaction under the runs' locks.
    An analysis that another one overtook is dropped, and the run stays owed (see `apply`)."""
    analyze_apart(store, runs, options.config, options.webhooks, options.clock,
                  lambda conn, run, applied, now: _record(conn, run, applied, options, now, outcome))


def _analyse_owed(store: Store, sources: list[str], options: _Options, outcome: ScanOutcome) -> None:
    """Analyse the runs of these sources whose analysis a stopped scan still owes."""
    with store.read() as conn:
        owed = stored_runs.owed_runs(conn, sources)
    for first in range(0, len(owed), BATCH_RUNS):
        _analyse_apart(store, owed[first : first + BATCH_RUNS], options, outcome)


def _record(conn, run: stored_runs.StoredRun, applied: Applied, options: _Options, now: float, outcome: ScanOutcome) -> None:
    """What an applied analysis changed, into the outcome (held until printed with a
    reporter); a failed analysis is a problem of that run."""
    if options.reporter is not None:
        reports.hold(conn, [e.id for e in applied.changes], options.reporter.claim, now + REPORT_LEASE)
    outcome.events += applied.changes
    if applied.error is not None:
        outcome.problems.append(Problem(f"{run.source}: run {run.name}", f"analysis failed: {applied.error}"))


def _take_over(store: Store, sources: list[str], reporter: Reporter, now: float) -> list[Reported]:
    """Hold (and return) the changes to these sources' runs that earlier scans committed and
    did not live to print."""
    with store.read() as conn:
        stale = [h for h in reports.held(conn, sources) if _abandoned(h, now)]
    if not stale:
        return []
    with store.write() as conn:
        reports.take_over(conn, stale, reporter.claim, now + REPORT_LEASE)
        return [Reported(source, event, i) for source, i, event in reports.load(conn, reporter.claim)]


def _abandoned(change: reports.Held, now: float) -> bool:
    """Whether the scan holding a change is gone: a process of this host that no longer
    exists, or, on another host, one whose lease ran out."""
    host, pid, *_ = change.holder.rsplit("/", 2) + ["", ""]
    if host == _host() and pid.isdigit() and os.name == "posix":
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False  # exists, owned by another user
        return False
    return change.lease is None or change.lease < now


def _host() -> str:
    return socket.gethostname()[:64]
