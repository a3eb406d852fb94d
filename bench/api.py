"""What the HTTP service costs, measured on a real `losswatch serve` process (uvicorn on
127.0.0.1, a subprocess) over SQLite and over PostgreSQL:

* bulk ingest: 10,000-point batches posted one after another by one client over a kept-alive
  connection, canonical JSON and NDJSON, rotating over 10 runs.  Points/s of wall time, and
  points per second of the server's CPU time (/proc/PID/stat), once for the requests alone
  and once including the deferred analysis the server does in the background afterwards;
* small appends: 16 clients, each a training loop posting 10 points to its own run, paced to
  200 requests/s in total for 15 s.  Latency percentiles, the rate achieved, and how many
  answers carried their analysis inline rather than deferring it;
* the floor: GET /healthz (an HTTP round trip plus a `SELECT 1`) under the same load, so the
  append latency can be judged against what any request costs.

    .venv/bin/python bench/api.py             # markdown on stdout, progress on stderr

PostgreSQL is the local server at 127.0.0.1:5432 (database `test`, user `postgres`), in a
fresh schema dropped at the end; its rows are skipped, with the reason, when it is not
reachable.  The client shares the machine with the server: on few cores it takes CPU from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TAGS = ("train/loss", "train/grad_norm", "train/lr", "train/loss_scale")

BATCH_POINTS = 10_000
BATCH_RUNS = 10          # bulk batches rotate over this many runs ...
BATCHES = 100            # ... this many batches per format (10 per run) ...
BATCH_BUDGET_S = 90.0    # ... or fewer, if they take longer than this
CLIENTS = 16
RATE = 200.0             # requests/s, all clients together
APPEND_S = 15.0
HEALTHZ_S = 5.0
APPEND_STEPS = 5         # 5 steps x 2 tags = 10 points a request
SETTLE_BUDGET_S = 60.0


def progress(message: str) -> None:
    print(f"[api bench] {message}", file=sys.stderr, flush=True)


# --- the server ------------------------------------------------------------------------------


@dataclass
class Server:
    base: str
    process: subprocess.Popen
    log: Path

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process (all its threads), from /proc."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def settle(self) -> float:
        """Wait until the server is idle again (deferred analyses done): its CPU time grows
        less than 5% over a 2 s window, which spans two rounds of its 1 s background loop.
        Returns the CPU time it spent meanwhile."""
        started, deadline = self.cpu_seconds(), time.monotonic() + SETTLE_BUDGET_S
        before = started
        while time.monotonic() < deadline:
            time.sleep(2.0)
            now = self.cpu_seconds()
            if now - before < 0.1:
                return before - started
            before = now
        progress(f"the server was still busy after {SETTLE_BUDGET_S:.0f} s")
        return before - started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def losswatch_command() -> str:
    """The venv's `losswatch`: the same installation this interpreter runs."""
    return str(Path(sys.executable).parent / "losswatch")


@contextlib.contextmanager
def running_server(db_url: str, workdir: Path) -> Iterator[Server]:
    """`losswatch serve` on a free loopback port; SIGTERM (then SIGKILL) however the bench
    ends.  Its JSON request log goes to a file: an unread pipe would fill and stall it."""
    port = free_port()
    log = workdir / f"serve-{port}.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            [losswatch_command(), "serve", "--host", "127.0.0.1", "--port", str(port), "--db", db_url,
             "--analysis-interval", "1"],
            stdout=sink, stderr=sink, cwd=workdir,
        )
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_healthy(server)
        yield server
    finally:
        stop(process)


def wait_healthy(server: Server, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited ({server.process.returncode}): {tail(server.log)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.base}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the server did not answer /healthz within {timeout:.0f} s: {tail(server.log)}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=40)  # serve drains in-flight requests for up to 30 s
        except subprocess.TimeoutExpired:
            progress("the server did not stop within 40 s of SIGTERM: killed")
            process.kill()
            process.wait()


def tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --- the stores ------------------------------------------------------------------------------


@dataclass
class StoreUnderTest:
    name: str
    url: str
    size: Callable[[], int]  # bytes the store takes on disk


@contextlib.contextmanager
def sqlite_store(workdir: Path) -> Iterator[StoreUnderTest]:
    path = workdir / "bench.db"
    yield StoreUnderTest("SQLite", f"sqlite:///{path}", lambda: sum(p.stat().st_size for p in workdir.glob("bench.db*")))


@contextlib.contextmanager
def postgres_store() -> Iterator[StoreUnderTest]:
    """A fresh schema in the local PostgreSQL, dropped at the end."""
    schema = f"lw_bench_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_URL, connect_args={"connect_timeout": 3})
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))

    def size() -> int:
        query = sa.text(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :schema AND c.relkind = 'r'"
        )
        with admin.connect() as conn:
            return int(conn.execute(query, {"schema": schema}).scalar())

    try:
        yield StoreUnderTest("PostgreSQL", f"{PG_URL}?options=-csearch_path%3D{schema}", size)
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def postgres_unreachable() -> str | None:
    """Why the PostgreSQL rows cannot run, or None."""
    try:
        with sa.create_engine(PG_URL, connect_args={"connect_timeout": 3}).connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.SQLAlchemyError as e:
        return f"PostgreSQL is not reachable at {PG_URL}: {str(getattr(e, 'orig', None) or e).strip().splitlines()[0]}"
    return None


# --- the payloads ----------------------------------------------------------------------------


def curve(steps: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """A realistic run's scalars: a decaying, noisy loss, a grad norm, an LR schedule and a
    constant fp16 loss scale, so the analysis has real curves to work on."""
    rng = np.random.default_rng(seed)
    loss = (2 + 3 * np.exp(-steps / 3000)) * (1 + 0.02 * rng.standard_normal(len(steps)))
    return {
        "train/loss": loss,
        "train/grad_norm": 0.5 * np.exp(0.1 * rng.standard_normal(len(steps))),
        "train/lr": 3e-4 * np.minimum(1.0, (steps + 1) / 2000),
        "train/loss_scale": np.full(len(steps), 65536.0),
    }


def points(first_step: int, steps: int, tags: tuple[str, ...], seed: int) -> list[dict]:
    step = np.arange(first_step, first_step + steps)
    values = curve(step, seed)
    return [{"step": int(s), "tag": tag, "value": float(values[tag][i])} for i, s in enumerate(step) for tag in tags]


def json_body(records: list[dict]) -> bytes:
    return json.dumps({"points": records}).encode()


def ndjson_body(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


FORMATS = {
    "JSON": (json_body, "application/json"),
    "NDJSON": (ndjson_body, "application/x-ndjson"),
}


# --- bulk ingest -----------------------------------------------------------------------------


@dataclass
class BulkResult:
    fmt: str
    batches: int
    points: int
    wall: float
    cpu: float
    cpu_after: float
    request_ms: list[float]
    analysis: Counter


def bulk_batches(fmt: str) -> Iterator[tuple[str, bytes]]:
    """(run, body) for each batch, built before timing: the client's JSON encoding is not the
    server's cost.  Batch i goes to run i % BATCH_RUNS, continuing that run's steps."""
    encode, _ = FORMATS[fmt]
    steps = BATCH_POINTS // len(TAGS)
    for i in range(BATCHES):
        run, round_ = i % BATCH_RUNS, i // BATCH_RUNS
        yield f"bulk-{fmt.lower()}-{run:02d}", encode(points(round_ * steps, steps, TAGS, seed=run))


def bulk_ingest(server: Server, fmt: str) -> BulkResult:
    _, content_type = FORMATS[fmt]
    batches = list(bulk_batches(fmt))
    request_ms, analysis, sent = [], Counter(), 0
    with httpx.Client(base_url=server.base, timeout=120, headers={"Content-Type": content_type}) as http:
        http.get("/healthz")  # the connection is open before the clock starts
        cpu0, t0 = server.cpu_seconds(), time.perf_counter()
        for run, body in batches:
            started = time.perf_counter()
            answer = checked(http.post(f"/v1/runs/{run}/points", content=body), BATCH_POINTS)
            request_ms.append((time.perf_counter() - started) * 1000)
            analysis[answer["analysis"]] += 1
            sent += 1
            if time.perf_counter() - t0 > BATCH_BUDGET_S:
                progress(f"{fmt}: stopped after {sent} batches ({BATCH_BUDGET_S:.0f} s budget)")
                break
        wall, cpu = time.perf_counter() - t0, server.cpu_seconds() - cpu0
    cpu_after = server.settle()
    return BulkResult(fmt, sent, sent * BATCH_POINTS, wall, cpu, cpu_after, request_ms, analysis)


def checked(response: httpx.Response, expected: int) -> dict:
    """The answer of a post that must have stored all `expected` points."""
    if response.status_code != 200:
        raise RuntimeError(f"POST {response.request.url.path}: {response.status_code} {response.text[:500]}")
    answer = response.json()
    if answer["accepted"] != expected or answer["rejected"]:
        raise RuntimeError(f"POST {response.request.url.path}: accepted {answer['accepted']} of {expected}: {answer['rejected'][:3]}")
    return answer


# --- paced clients ---------------------------------------------------------------------------


@dataclass
class Paced:
    name: str
    seconds: float
    cpu: float = 0.0  # the server's CPU time meanwhile
    latency_ms: list[float] = field(default_factory=list)
    inline_ms: list[float] = field(default_factory=list)  # the latencies of the answers analysed inline
    lag_ms: list[float] = field(default_factory=list)  # how late each request left, against its schedule
    analysis: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, latency: float, lag: float, analysis: str | None, error: str | None) -> None:
        with self.lock:
            self.latency_ms.append(latency * 1000)
            self.lag_ms.append(lag * 1000)
            if analysis is not None:
                self.analysis[analysis] += 1
            if analysis == "done":
                self.inline_ms.append(latency * 1000)
            if error is not None:
                self.errors.append(error)


Request = Callable[[httpx.Client, int, int], tuple[str | None, str | None]]  # (http, client, i) -> (analysis, error)


def paced(server: Server, name: str, seconds: float, request: Request) -> Paced:
    """CLIENTS threads, each on its own kept-alive connection, sending on a fixed schedule
    (RATE/CLIENTS requests/s each, starts staggered) for `seconds`.  A request that cannot
    leave on time leaves late rather than being skipped; the lag is recorded."""
    result = Paced(name, seconds)
    interval = CLIENTS / RATE
    start = time.perf_counter() + 0.5  # every client connected before the first send

    def client(c: int) -> None:
        with httpx.Client(base_url=server.base, timeout=30) as http:
            http.get("/healthz")
            first = start + c * interval / CLIENTS
            for i in range(int(seconds / interval)):
                due = first + i * interval
                time.sleep(max(0.0, due - time.perf_counter()))
                sent = time.perf_counter()
                try:
                    analysis, error = request(http, c, i)
                except httpx.HTTPError as e:
                    analysis, error = None, f"{type(e).__name__}: {e}"
                result.record(time.perf_counter() - sent, sent - due, analysis, error)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    cpu0 = server.cpu_seconds()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.seconds, result.cpu = time.perf_counter() - start, server.cpu_seconds() - cpu0
    return result


def append_request(http: httpx.Client, c: int, i: int) -> tuple[str | None, str | None]:
    """Client c's i-th post: the next APPEND_STEPS steps of its loss and grad norm."""
    body = json_body(points(i * APPEND_STEPS, APPEND_STEPS, TAGS[:2], seed=c))
    r = http.post(f"/v1/runs/append-{c:02d}/points", content=body, headers={"Content-Type": "application/json"})
    if r.status_code != 200:
        return None, f"{r.status_code} {r.text[:200]}"
    answer = r.json()
    if answer["accepted"] != 2 * APPEND_STEPS:
        return answer["analysis"], f"accepted {answer['accepted']} of {2 * APPEND_STEPS}"
    return answer["analysis"], None


def healthz_request(http: httpx.Client, c: int, i: int) -> tuple[str | None, str | None]:
    r = http.get("/healthz")
    return None, None if r.status_code == 200 else f"{r.status_code} {r.text[:200]}"


# --- one store -------------------------------------------------------------------------------


@dataclass
class StoreResults:
    store: str
    bulk: list[BulkResult]
    paced: list[Paced]
    runs: list[dict]
    size: int


def bench_store(store: StoreUnderTest, workdir: Path) -> StoreResults:
    progress(f"{store.name}: starting the server")
    with running_server(store.url, workdir) as server:
        bulk = []
        for fmt in FORMATS:
            progress(f"{store.name}: bulk ingest, {fmt}, {BATCHES} x {BATCH_POINTS:,} points")
            bulk.append(bulk_ingest(server, fmt))
        progress(f"{store.name}: {CLIENTS} clients appending 10 points, {RATE:.0f} req/s for {APPEND_S:.0f} s")
        appends = paced(server, "POST 10 points", APPEND_S, append_request)
        server.settle()
        progress(f"{store.name}: {CLIENTS} clients on GET /healthz, {RATE:.0f} req/s for {HEALTHZ_S:.0f} s")
        floor = paced(server, "GET /healthz (floor)", HEALTHZ_S, healthz_request)
        runs = httpx.get(f"{server.base}/v1/runs", timeout=60).json()
    return StoreResults(store.name, bulk, [appends, floor], runs, store.size())


# --- the report ------------------------------------------------------------------------------


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def ms(values: list[float], q: float) -> str:
    return f"{np.percentile(values, q):.1f}" if values else "-"


def share(counter: Counter, key: str) -> str:
    total = sum(counter.values())
    return f"{100 * counter[key] / total:.0f}%" if total else "-"


def bulk_table(results: list[StoreResults]) -> str:
    rows = [
        [r.store, b.fmt, b.batches, f"{b.points:,}", f"{b.wall:.1f}", f"{b.points / b.wall:,.0f}",
         f"{b.cpu:.1f}", f"{b.points / b.cpu:,.0f}", f"{b.cpu_after:.1f}", f"{b.points / (b.cpu + b.cpu_after):,.0f}",
         ms(b.request_ms, 50), ms(b.request_ms, 99), f"{b.analysis['done']}/{b.analysis['deferred']}"]
        for r in results for b in r.bulk
    ]
    headers = ["store", "format", "batches", "points", "wall s", "points/s", "server CPU s", "points/CPU-s",
               "+ CPU s after", "points/CPU-s incl. after", "p50 ms/batch", "p99 ms/batch", "inline/deferred"]
    return table(headers, rows)


def paced_table(results: list[StoreResults]) -> str:
    rows = [
        [r.store, p.name, len(p.latency_ms), f"{len(p.latency_ms) / p.seconds:.0f}", ms(p.latency_ms, 50),
         ms(p.latency_ms, 90), ms(p.latency_ms, 99), f"{max(p.latency_ms, default=0):.1f}", ms(p.lag_ms, 99),
         f"{1000 * p.cpu / len(p.latency_ms):.2f}", share(p.analysis, "done"), share(p.analysis, "deferred"),
         f"{ms(p.inline_ms, 50)} / {ms(p.inline_ms, 99)}" if p.inline_ms else "-", len(p.errors)]
        for r in results for p in r.paced
    ]
    headers = ["store", "request", "requests", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms",
               "p99 late start ms", "server CPU ms/req", "analysed inline", "deferred", "inline p50 / p99 ms", "errors"]
    return table(headers, rows)


def runs_table(results: list[StoreResults]) -> str:
    rows = [
        [r.store, run["name"], f"{run['points']:,}", run["last_step"],
         " ".join(f"{k}={v}" for k, v in run["open_alerts"].items() if v) or "-"]
        for r in results for run in sorted(r.runs, key=lambda run: run["name"])
    ]
    return table(["store", "run", "points", "last step", "open alerts"], rows)


def size_table(results: list[StoreResults]) -> str:
    rows = []
    for r in results:
        stored = sum(run["points"] for run in r.runs)
        rows.append([r.store, f"{stored:,}", f"{r.size / 2**20:.1f}", f"{r.size / stored:.0f}" if stored else "-"])
    return table(["store", "points stored", "MiB on disk", "bytes/point"], rows)


def report(results: list[StoreResults], skipped: list[str]) -> str:
    parts = [
        f"## Bulk ingest: {BATCH_POINTS:,}-point batches, one client, sequential, keep-alive, "
        f"rotating over {BATCH_RUNS} runs ({len(TAGS)} tags each)",
        bulk_table(results),
        "`server CPU s`: the server process's CPU time while the batches were posted; `+ CPU s after`: what it "
        "spent afterwards until idle (the deferred analyses). `inline/deferred`: batches analysed in the request / "
        "left to the background loop.",
        f"## Small appends: {CLIENTS} clients x 10 points (each its own run), paced to {RATE:.0f} req/s in total",
        paced_table(results),
        "`p99 late start`: how late the 99th-percentile request left against its schedule (the client could not "
        "keep up: a sign of saturation). `server CPU ms/req`: the server's CPU time over the phase (its background "
        "loop included) per request. /healthz is an HTTP round trip plus `SELECT 1`.",
        "## Runs at the end",
        runs_table(results),
        size_table(results),
        f"Machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; client and server share it.",
    ]
    parts += [f"Errors ({r.store}, {p.name}): {p.errors[:3]}" for r in results for p in r.paced if p.errors]
    parts += [f"Skipped: {reason}" for reason in skipped]
    return "\n\n".join(parts)


def main() -> None:
    results, skipped = [], []
    with tempfile.TemporaryDirectory(prefix="lw-api-bench-") as tmp:
        workdir = Path(tmp)
        with sqlite_store(workdir) as store:
            results.append(bench_store(store, workdir))
        reason = postgres_unreachable()
        if reason:
            progress(reason)
            skipped.append(reason)
        else:
            with postgres_store() as store:
                results.append(bench_store(store, workdir))
    print(report(results, skipped))


if __name__ == "__main__":
    main()
