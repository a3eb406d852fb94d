"""Small appends on PostgreSQL against a real `losswatch serve` (issue 11, "Ingest that scales
out"), old code beside new in the same run:

* statements: what one small append sends to the database (SQLAlchemy's
  `before_cursor_execute`, in a process running the code under test): 10 points (5 steps x
  2 tags) and 8 points (1 step x 8 tags) with the analysis deferred, and 10 points analysed
  inline.  Transaction control (BEGIN, COMMIT) and the pool's ping are not counted;
* group commit in process: 32 runs posted to in turn, 10 points a post, `size` posts
  written per transaction (`app.service.ingest.ingest_json_group`; the old code: one each),
  without HTTP: wall, CPU and PostgreSQL's CPU (all its processes, from /proc) per post;
* a deferred analysis in process: 32 runs posted 24 times each (10 points a post, the
  120 steps a loop posting 24 times a second brings per `--analysis-interval`), then
  analysed in one batch as a worker's background loop does (`analyze_apart`): CPU per run;
* the app's CPU per small append: its ASGI callable (every middleware, the route, the
  answer) driven in process by one 10-point post after another, the group writer stubbed to
  answer at once: what the HTTP stack costs a worker on top of uvicorn and the writing;
* small appends vs workers: 32 clients (one asyncio process, raw HTTP/1.1 over kept-alive
  connections: the client costs little CPU), each a training loop posting 10 points to its
  own run.  Paced at 200 requests/s in total for the latency (p50/p99, from when each request
  was due), then closed-loop (each client posts again as soon as answered) for the max
  sustained rate.  Server CPU (all its processes, from /proc) per request;
* a 10-point append to a run already holding 10M points (8 tags x 1.25M steps, written by
  direct store calls and analysed once), one client at 40 requests/s: p50/p99.  With the
  default `--analysis-interval 1`, one answer a second carries the run's analysis inline:
  those answers apart (p50, max) and the others' p99, as the analysed ones set the p99.
  Then the same appends in process, without HTTP (an analysed one after every three
  deferred ones): wall and CPU of each kind, CPU being what the machine's load moves least.

Rows "analysis deferred" serve with `--analysis-interval 3600`: every analysis runs in the
background loop, so the answers cost the append alone (what a bulk loader sees).

    .venv/bin/python bench/append.py                               # this checkout only
    mkdir /tmp/lw-main && git archive main | tar -x -C /tmp/lw-main  # the old code, once,
    cp app/ingest/_tfrecord.*.so /tmp/lw-main/app/ingest/            # with the built extension
    .venv/bin/python bench/append.py --code /tmp/lw-main           # old beside new
    .venv/bin/python bench/append.py --quick                       # 1M-point run, shorter phases
    .venv/bin/python bench/append.py --code /tmp/lw-main --alternate 3  # 2 workers, old and new in turn
    .venv/bin/python bench/append.py --code /tmp/lw-main --big 3        # the 10M-point run, old and new in turn

Markdown on stdout, progress on stderr.  Goals: p99 <= 20 ms for the 10M-point append;
>= 1,000 requests/s with 2 workers.  The machine's cores are shared by the client, the
server and PostgreSQL: compare the columns of one run, not runs on different machines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.config import AnalysisConfig  # noqa: E402
from app.ingest.logdir import RunState  # noqa: E402
from app.ingest.restarts import SegmentState  # noqa: E402
from app.service.settings import HTTP_SOURCE  # noqa: E402
from app.store import runs as stored_runs  # noqa: E402
from app.store.db import open_store  # noqa: E402
from app.updates import reassess, store_points  # noqa: E402
from bench.api import Server, free_port, losswatch_command, postgres_store, postgres_unreachable, stop, wait_healthy  # noqa: E402
from bench.scale import TAGS8, points  # noqa: E402

CLIENTS = 32
PACED_RATE = 200.0  # requests/s, all clients together
STEPS, TAGS = 5, ("train/loss", "train/grad_norm")  # 10 points a request
BIG_STEPS = 1_250_000  # x 8 tags: the 10M-point run
BIG_BATCH = 250_000  # steps stored per transaction while building it
BIG_RATE = 40.0
GROUP_SIZES = (4, 16, 32)  # posts per transaction, in process (1: each code's own row)


def progress(message: str) -> None:
    print(f"[append bench] {message}", file=sys.stderr, flush=True)


# --- the server ------------------------------------------------------------------------------


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and all its descendants (the workers), from /proc."""
    total, pending = 0.0, [pid]
    while pending:
        p = pending.pop()
        with contextlib.suppress(FileNotFoundError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{p}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
    return total


@contextlib.contextmanager
def serving(url: str, workdir: Path, code: Path | None, workers: int, deferred: bool = False) -> Iterator[Server]:
    """`losswatch serve` of the code at `code` (None: this checkout); `deferred`: every
    analysis in the background (`--analysis-interval 3600`), so answers cost the append alone."""
    port = free_port()
    log = workdir / f"serve-{port}.log"
    env = {**os.environ, **({"PYTHONPATH": str(code)} if code else {})}
    extra = (["--workers", str(workers)] if workers > 1 else []) + (["--analysis-interval", "3600"] if deferred else [])
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            [losswatch_command(), "serve", "--port", str(port), "--db", url, "--insecure", *extra],
            stdout=sink, stderr=sink, cwd=workdir, env=env,
        )
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_healthy(server, timeout=120)
        wait_for_workers(server, workers, timeout=120)
        yield server
    finally:
        stop(process)


def wait_for_workers(server: Server, workers: int, timeout: float) -> None:
    """Until every worker has started: /healthz answers once one has, and connections
    opened before the others are up all go to it (a 2-worker row would measure one)."""
    deadline = time.monotonic() + timeout
    while server.log.read_bytes().count(b"Application startup complete") < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workers} workers did not all start within {timeout:.0f} s")
        time.sleep(0.1)


# --- the client ------------------------------------------------------------------------------


def body(first: int, tags: tuple[str, ...] = TAGS, steps: int = STEPS) -> bytes:
    records = [{"step": s, "tag": t, "value": 2.0 + ((s * 7919 + i) % 97) / 970.0}
               for s in range(first, first + steps) for i, t in enumerate(tags)]
    return json.dumps({"points": records}).encode()


@dataclass
class Load:
    latencies: list[float] = field(default_factory=list)  # seconds, from when each was due
    analysed: list[bool] = field(default_factory=list)  # whether each answer carried the analysis inline
    answers: Counter = field(default_factory=Counter)  # status, and "inline" for analysed answers
    seconds: float = 0.0
    cpu: float = 0.0  # the server's CPU seconds meanwhile

    @property
    def sent(self) -> int:
        return len(self.latencies)


class Connection:
    """One kept-alive HTTP/1.1 connection posting to one run."""

    def __init__(self, port: int, run: str, first_step: int) -> None:
        self.port, self.path, self.step = port, f"/v1/runs/{run}/points", first_step

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def post(self, load: Load) -> bool:
        """Post the next 10 points; a connection the server closed (a worker replaced, an idle
        keep-alive ended) is opened again and the post sent again (appends are idempotent).
        Whether the answer carried the run's analysis."""
        payload = body(self.step)
        self.step += STEPS
        head = (f"POST {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n").encode()
        while True:
            with contextlib.suppress(ConnectionError):
                self.writer.write(head + payload)
                if status_line := await self.reader.readline():
                    break
            load.answers["reconnected"] += 1
            self.close()
            await self.open()
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        answer = await self.reader.readexactly(length)
        status = int(status_line.split()[1])
        load.answers[status] += 1
        analysed = b'"analysis":"done"' in answer
        load.answers["inline"] += analysed
        return analysed

    def close(self) -> None:
        self.writer.close()


async def run_load(connections: list[Connection], seconds: float, rate: float | None) -> Load:
    """Each connection posts in turn: at `rate` in total (None: as fast as answered)."""
    load = Load()
    start = time.perf_counter()

    async def client(c: int) -> None:
        i = 0
        while True:
            due = start + (i * len(connections) + c) / rate if rate else time.perf_counter()
            if due - start >= seconds:
                return
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            load.analysed.append(await connections[c].post(load))
            load.latencies.append(time.perf_counter() - due)
            i += 1

    await asyncio.gather(*(client(c) for c in range(len(connections))))
    load.seconds = time.perf_counter() - start
    return load


async def drive(
    port: int, runs: list[tuple[str, int]], phases: list[tuple[float, float | None]], pid: int
) -> tuple[list[Load], list[int]]:
    """Open a connection per (run, first step), then run each (seconds, rate) phase; the
    loads and the step each run's next post would start at."""
    connections = [Connection(port, run, first) for run, first in runs]
    await asyncio.gather(*(c.open() for c in connections))
    loads = []
    try:
        for seconds, rate in phases:
            cpu = tree_cpu_seconds(pid)
            load = await run_load(connections, seconds, rate)
            load.cpu = tree_cpu_seconds(pid) - cpu
            loads.append(load)
    finally:
        for c in connections:
            c.close()
    return loads, [c.step for c in connections]


def port_of(server: Server) -> int:
    return int(server.base.rsplit(":", 1)[1])


# --- the cases -------------------------------------------------------------------------------


STATEMENTS_SNIPPET = textwrap.dedent("""
    import json, sys
    import sqlalchemy as sa
    from app.service.ingest import ingest_json
    from app.service.settings import Settings
    from app.store.db import open_store
    store = open_store(sys.argv[1])
    def ndjson(first, steps, tags):
        return "\\n".join(json.dumps({"step": s, "tag": t, "value": 3.0 - s / 1000})
                          for s in range(first, first + steps) for t in tags).encode()
    def count(run, first, steps, tags, interval, now):
        sent = []
        def record(*args):
            sent.append(1)
        sa.event.listen(store.engine, "before_cursor_execute", record)
        ingest_json(store, run, ndjson(first, steps, tags), True, True, Settings(analysis_interval=interval), now)
        sa.event.remove(store.engine, "before_cursor_execute", record)
        return len(sent)
    two, eight = ("train/loss", "train/grad_norm"), tuple(f"t{i}" for i in range(8))
    ingest_json(store, "two", ndjson(0, 100, two), True, True, Settings(), 1000.0)
    ingest_json(store, "eight", ndjson(0, 100, eight), True, True, Settings(), 1000.0)
    print(json.dumps([count("two", 100, 5, two, 3600.0, 1001.0), count("eight", 100, 1, eight, 3600.0, 1001.0),
                      count("two", 105, 5, two, 0.0, 1002.0)]))
""")


def snippet_result(code: Path | None, snippet: str, *args: object) -> Any:
    """What `snippet` prints as JSON, run with these arguments in a process of its own on the
    code at `code` (None: this checkout), so old and new code are measured alike."""
    code = code or Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", snippet, *map(str, args)], env={**os.environ, "PYTHONPATH": str(code)},
                         cwd=code, capture_output=True, check=True, text=True)
    return json.loads(out.stdout)


def statements(code: Path | None) -> list[int]:
    """[10 points deferred, 8 tags deferred, 10 points analysed inline] of the code at `code`."""
    with postgres_store() as store:
        return snippet_result(code, STATEMENTS_SNIPPET, store.url)


GROUP_SNIPPET = textwrap.dedent("""
    import json, os, sys, time
    from app.service import ingest
    from app.service.settings import Settings
    from app.store.db import open_store
    store, size, rounds = open_store(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    deferred = Settings(analysis_interval=3600.0)
    runs = [f"loop-{c}" for c in range(32)]
    def body(first):
        return json.dumps({"points": [{"step": s, "tag": t, "value": 2.0 + s / 1000} for s in range(first, first + 5)
                                      for t in ("train/loss", "train/grad_norm")]}).encode()
    def postgres_cpu():
        total = 0.0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = open(f"/proc/{pid}/stat").read()
            except OSError:
                continue
            if "(postgres)" in stat:
                fields = stat.rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total
    def post_round(first):
        for at in range(0, len(runs), size):
            if size == 1:
                ingest.ingest_json(store, runs[at], body(first), False, False, deferred, time.time())
            else:
                posts = [ingest.PostedPoints(r, body(first), False, False, time.time()) for r in runs[at : at + size]]
                ingest.ingest_json_group(store, posts, deferred)
    for r in range(10):
        post_round(5 * r)
    wall, cpu, pg = time.perf_counter(), time.process_time(), postgres_cpu()
    for r in range(10, 10 + rounds):
        post_round(5 * r)
    n = rounds * len(runs)
    print(json.dumps([(time.perf_counter() - wall) / n, (time.process_time() - cpu) / n, (postgres_cpu() - pg) / n]))
""")


def group_costs(code: Path | None, size: int, rounds: int) -> list[float]:
    """[wall, CPU, PostgreSQL CPU] seconds per post, posts written `size` to a transaction
    in one process (no HTTP): 32 runs, 10 points a post, the analysis deferred."""
    with postgres_store() as store:
        return snippet_result(code, GROUP_SNIPPET, store.url, size, rounds)


ANALYSIS_SNIPPET = textwrap.dedent("""
    import json, sys, time
    from analyzers.config import AnalysisConfig
    from app.service import ingest
    from app.service.settings import Settings
    from app.store import runs as stored_runs
    from app.store.db import open_store
    from app.updates import analyze_apart
    store, rounds = open_store(sys.argv[1]), int(sys.argv[2])
    deferred = Settings(analysis_interval=3600.0)
    runs = [f"loop-{c}" for c in range(32)]
    def body(first):
        return json.dumps({"points": [{"step": s, "tag": t, "value": 2.0 + s / 1000} for s in range(first, first + 5)
                                      for t in ("train/loss", "train/grad_norm")]}).encode()
    first, cpu, analysed = 0, 0.0, 0
    for r in range(2 + rounds):
        for _ in range(24):  # a second of a loop posting 24 times a second
            for at in (0, 16):
                ingest.ingest_json_group(store, [ingest.PostedPoints(n, body(first), False, False, time.time()) for n in runs[at : at + 16]], deferred)
            first += 5
        with store.write() as conn:
            claimed = stored_runs.claim_dirty_runs(conn, time.time() + 1, time.time(), len(runs))
        started = time.process_time()
        analyze_apart(store, claimed, AnalysisConfig(), [], time.time)
        if r >= 2:  # the first two: the runs' first analyses
            cpu += time.process_time() - started
            analysed += len(claimed)
    print(json.dumps(cpu / analysed))
""")


def analysis_cost(code: Path | None, rounds: int) -> float:
    """CPU seconds per run of the background's deferred analysis, in process: 32 runs posted
    10 points 24 times each (the 120 steps a run posting 24 times a second brings in the
    default `--analysis-interval` of 1 s), then analysed in one batch (`analyze_apart`, as
    a worker's loop does), `rounds` times."""
    with postgres_store() as store:
        return snippet_result(code, ANALYSIS_SNIPPET, store.url, rounds)


APP_SNIPPET = textwrap.dedent("""
    import asyncio, json, logging, logging.config, sys, time
    from app.service.app import create_app
    from app.service.logs import log_config
    from app.service.ingest import IngestResult
    from app.service.settings import Settings
    posts = int(sys.argv[2])
    body = json.dumps({"points": [{"step": s, "tag": t, "value": 2.0} for s in range(5) for t in ("train/loss", "train/grad_norm")]}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/runs/loop-0/points", "raw_path": b"/v1/runs/loop-0/points", "query_string": b"", "root_path": "",
             "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000),
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    class Answered:  # the group writer, answering at once
        async def post(self, posted):
            return IngestResult(accepted=10, analysis="deferred")
        def close(self):
            pass
    async def post(app):
        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}
        async def send(message):
            pass
        await app(dict(scope, state={}), receive, send)
    async def main():
        app = create_app(Settings(db_url=sys.argv[1], background=False, auth="open"))
        logging.config.dictConfig(log_config())  # as `serve` logs: each request's line formatted, here not shown
        logging.getLogger("losswatch").handlers[0].setStream(open("/dev/null", "w"))
        async with app.router.lifespan_context(app):
            app.state.appends = Answered()
            for _ in range(500):
                await post(app)
            cpu = time.process_time()
            for _ in range(posts):
                await post(app)
            print(json.dumps((time.process_time() - cpu) / posts))
    asyncio.run(main())
""")


def app_cost(code: Path | None, posts: int) -> float:
    """CPU seconds the app (`create_app`) of the code at `code` spends per small append, the
    group writer stubbed (no database work), in a process of its own."""
    with tempfile.TemporaryDirectory(prefix="append-bench-app-") as tmp:
        return snippet_result(code, APP_SNIPPET, f"sqlite:///{tmp}/store.db", posts)


def small_appends(code: Path | None, workers: int, deferred: bool, seconds: float, workdir: Path) -> tuple[Load, Load]:
    """(paced, closed-loop) small appends, each client to its own run, on a fresh schema."""
    with postgres_store() as store, serving(store.url, workdir, code, workers, deferred) as server:
        runs = [(f"loop-{c}", 0) for c in range(CLIENTS)]
        phases = [(2.0, None), (seconds, PACED_RATE), (seconds, None)]
        (_, paced, closed), _ = asyncio.run(drive(port_of(server), runs, phases, server.process.pid))
        return paced, closed


def build_big_run(url: str, steps: int) -> str:
    """One run of `steps` steps x 8 tags posted-run style (source http), analysed once."""
    store = open_store(url)
    name = "big"
    try:
        for first in range(0, steps, BIG_BATCH):
            batch = points(first, min(BIG_BATCH, steps - first), TAGS8, seed=1)
            with store.write() as conn:
                run = stored_runs.lock_run(conn, HTTP_SOURCE, name, time.time())
                state = RunState(SegmentState(0, {t: first + len(batch) // len(TAGS8) - 1 for t in TAGS8}), {})
                store_points(conn, run, batch, np.zeros(len(batch), np.int32), (), state, time.time())
            progress(f"stored {first + BIG_BATCH:,} of {steps:,} steps")
        started = time.perf_counter()
        with store.write() as conn:
            run = stored_runs.lock_run(conn, HTTP_SOURCE, name, time.time())
            reassess(conn, run, AnalysisConfig(), (), time.time())
        progress(f"analysed the run once in {time.perf_counter() - started:.1f} s")
    finally:
        store.close()
    return name


BUILD_SNIPPET = textwrap.dedent("""
    import dataclasses, sys
    import numpy as np
    import bench.append as bench
    plain = bench.points
    def points(*args, **kwargs):  # the values this checkout's bench builds: float32, as an event file holds them
        p = plain(*args, **kwargs)
        return dataclasses.replace(p, value=p.value.astype(np.float32).astype(np.float64))
    bench.points = points
    print(bench.build_big_run(sys.argv[1], int(sys.argv[2])))
""")


def build_with(code: Path | None, url: str, steps: int) -> str:
    """The big run built and analysed by this code (None: this checkout) in the schema at
    `url`: each code's store is at its own schema revision, its state in its own format,
    as a deployment of that code would have it."""
    if code is None:
        return build_big_run(url, steps)
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run([sys.executable, "-c", BUILD_SNIPPET, url, str(steps)], env=env, cwd=code,
                         stdout=subprocess.PIPE, check=True, text=True)
    return out.stdout.strip()


BIG_SNIPPET = textwrap.dedent("""
    import json, statistics, sys, time
    from app.service.ingest import ingest_json
    from app.service.settings import Settings
    from app.store.db import open_store
    store, name, step, rounds = open_store(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    def post(analysed):
        global step
        body = json.dumps({"points": [{"step": s, "tag": t, "value": 2.0 + ((s * 7919 + i) % 97) / 970.0}
                                      for s in range(step, step + 5) for i, t in enumerate(("train/loss", "train/grad_norm"))]}).encode()
        step += 5
        wall, cpu = time.perf_counter(), time.process_time()
        answer = ingest_json(store, name, body, False, False, Settings(analysis_interval=0.0 if analysed else 3600.0), time.time())
        assert answer.analysis == ("done" if analysed else "deferred"), answer.analysis
        return time.perf_counter() - wall, time.process_time() - cpu
    costs = {True: [], False: []}
    for r in range(rounds + 2):
        for analysed in (False, False, False, True):
            cost = post(analysed)
            if r >= 2:
                costs[analysed].append(cost)
    print(json.dumps([[statistics.median(c[i] for c in costs[a]) for i in (0, 1)] for a in (True, False)] + [step]))
""")


def big_in_process(url: str, name: str, first: int, code: Path | None, rounds: int) -> tuple[list[list[float]], int]:
    """[[wall, CPU] of an analysed append, [wall, CPU] of a deferred one] (medians, seconds)
    to the big run in a process of its own, without HTTP: each analysed append after three
    deferred ones, as at 40 requests/s; and the step the next would start at."""
    analysed, deferred, after = snippet_result(code, BIG_SNIPPET, url, name, first, rounds)
    return [analysed, deferred], after


def big_appends(
    url: str, name: str, first: int, code: Path | None, deferred: bool, seconds: float, workdir: Path
) -> tuple[Load, int]:
    """Appends to the big run from step `first`: the load, and the step the next would start at."""
    with serving(url, workdir, code, 1, deferred) as server:
        phases = [(1.0, None), (seconds, BIG_RATE)]
        (_, load), (after,) = asyncio.run(drive(port_of(server), [(name, first)], phases, server.process.pid))
        return load, after


# --- the tables ------------------------------------------------------------------------------


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def ms(load: Load, q: float) -> str:
    return f"{np.percentile(load.latencies, q) * 1000:.1f}"


def split_ms(load: Load) -> list[str]:
    """The answers carrying the analysis (p50, max) and the others (p99): an analysed one a
    second is 2.5% of the answers at 40 requests/s, so they set the p99."""
    latencies, analysed = np.array(load.latencies) * 1000, np.array(load.analysed)
    inline, other = latencies[analysed], latencies[~analysed]
    return [f"{np.percentile(inline, 50):.1f}" if len(inline) else "-", f"{inline.max():.1f}" if len(inline) else "-",
            f"{np.percentile(other, 99):.1f}" if len(other) else "-"]


def load_row(label: str, load: Load) -> list:
    errors = load.sent - load.answers[200]
    return [label, load.sent, f"{load.sent / load.seconds:.0f}", ms(load, 50), ms(load, 99), ms(load, 100),
            f"{load.cpu / max(load.sent, 1) * 1000:.2f}", load.answers["inline"], errors, load.answers["reconnected"]]


def case_label(code: str, workers: int, deferred: bool) -> str:
    return f"{code}, {workers}" + (", analysis deferred" if deferred else "")


LOAD_HEADERS = ["code, workers", "requests", "req/s", "p50 ms", "p99 ms", "max ms", "server CPU ms/req", "analysed inline",
                "not 200", "reconnected"]


def alternate(codes: list[tuple[str, Path | None]], rounds: int, seconds: float) -> None:
    """The 2-worker closed loop, analysis deferred and inline, each code in turn `rounds`
    times: on a shared machine only rows measured side by side compare."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="append-bench-") as tmp:
        for r in range(rounds):
            for deferred in (True, False):
                for label, code in codes:
                    progress(f"round {r + 1}: {label}, 2 workers{', analysis deferred' if deferred else ''}")
                    _, closed = small_appends(code, 2, deferred, seconds, Path(tmp))
                    rows.append(load_row(f"{case_label(label, 2, deferred)} (round {r + 1})", closed))
    print(f"### Small appends, {CLIENTS} clients, closed loop, 2 workers, in turn ({seconds:.0f} s)\n")
    print(table(LOAD_HEADERS, rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, help="a checkout of the old code (e.g. main), run beside this one")
    parser.add_argument("--quick", action="store_true", help="a 1M-point run and 5 s phases")
    parser.add_argument("--alternate", type=int, metavar="ROUNDS",
                        help="only the 2-worker closed loop, each code in turn, ROUNDS times (6 s phases)")
    parser.add_argument("--big", type=int, metavar="ROUNDS",
                        help="only the 10M-point run's appends, each code in turn, ROUNDS times (20 s phases)")
    args = parser.parse_args()
    if reason := postgres_unreachable():
        sys.exit(f"append bench: {reason}")
    seconds, big_steps = (5.0, 125_000) if args.quick else (10.0, BIG_STEPS)
    codes = ([("old", args.code)] if args.code else []) + [("new", None)]
    if args.alternate:
        alternate(codes, args.alternate, 6.0)
        return
    if args.big:
        with tempfile.TemporaryDirectory(prefix="append-bench-") as tmp:
            big_run(codes, big_steps, 20.0 if not args.quick else seconds, args.big, Path(tmp))
        return
    print("### Statements per small append (PostgreSQL)\n")
    rows = []
    for label, code in codes:
        progress(f"statements: {label}")
        rows.append([label, *statements(code)])
    print(table(["code", "10 points, 2 tags, deferred", "8 points, 8 tags, deferred", "10 points, analysed inline"], rows))
    print("\n### Posts written per transaction, in one process (no HTTP; 10 points, analysis deferred)\n")
    rows = []
    for label, code, size in [(label, code, 1) for label, code in codes] + [("new", None, n) for n in GROUP_SIZES]:
        progress(f"groups of {size}: {label}")
        wall, cpu, pg = group_costs(code, size, 30 if args.quick else 100)
        rows.append([label, size, f"{wall * 1000:.2f}", f"{cpu * 1000:.2f}", f"{pg * 1000:.2f}"])
    print(table(["code", "posts per transaction", "wall ms/post", "CPU ms/post", "PostgreSQL CPU ms/post"], rows))
    print("\n### A deferred analysis, in process (32 runs, 24 posts of 10 points each, then one batch; 2 runs each, in turn)\n")
    spent = in_turn(codes, 2, "deferred analyses", lambda code: analysis_cost(code, 4 if args.quick else 10))
    print(table(["code", "CPU ms per run analysed (best of 2)", "both"], best_of(spent, 1000, 2)))
    print("\n### The app's CPU per small append, in process (the group writer stubbed; 3 runs each, in turn)\n")
    costs = in_turn(codes, 3, "the app's CPU per post", lambda code: app_cost(code, 1000 if args.quick else 4000))
    print(table(["code", "app CPU us/post (best of 3)", "all 3"], best_of(costs, 1e6, 0)))
    with tempfile.TemporaryDirectory(prefix="append-bench-") as tmp:
        workdir = Path(tmp)
        paced_rows, closed_rows = [], []
        cases = [(label, code, 1, False) for label, code in codes] + [("new", None, 2, False), ("new", None, 2, True)]
        for label, code, workers, deferred in cases:
            progress(f"small appends: {label}, {workers} worker(s){', analysis deferred' if deferred else ''}")
            paced, closed = small_appends(code, workers, deferred, seconds, workdir)
            paced_rows.append(load_row(case_label(label, workers, deferred), paced))
            closed_rows.append(load_row(case_label(label, workers, deferred), closed))
        print(f"\n### Small appends, {CLIENTS} clients, paced at {PACED_RATE:.0f} req/s ({seconds:.0f} s)\n")
        print(table(LOAD_HEADERS, paced_rows))
        print(f"\n### Small appends, {CLIENTS} clients, closed loop: max sustained rate ({seconds:.0f} s)\n")
        print(table(LOAD_HEADERS, closed_rows))
        big_run(codes, big_steps, seconds, 1, workdir)


def in_turn(codes: list[tuple[str, Path | None]], rounds: int, what: str, measure: Callable[[Path | None], float]) -> dict[str, list[float]]:
    """`measure(code)` of each code in turn, `rounds` times, so the machine's swings fall on
    every code alike."""
    out: dict[str, list[float]] = {label: [] for label, _ in codes}
    for _ in range(rounds):
        for label, code in codes:
            progress(f"{what}: {label}")
            out[label].append(measure(code))
    return out


def best_of(results: dict[str, list[float]], scale: float, digits: int) -> list[list[str]]:
    """Rows of each code's best (lowest) figure, then all of them, in `scale` units."""
    return [[label, f"{min(c) * scale:.{digits}f}", " ".join(f"{x * scale:.{digits}f}" for x in c)] for label, c in results.items()]


def big_run(codes: list[tuple[str, Path | None]], steps: int, seconds: float, rounds: int, workdir: Path) -> None:
    """The 10M-point run's tables: over HTTP, each code in turn `rounds` times, then the new
    code with the analysis deferred; then in process, each code twice in turn.  Each code
    appends to a run of its own, built and analysed by it."""
    with contextlib.ExitStack() as stack:
        built = {}  # label -> [url, run name, the step its next append starts at]
        for label, code in codes:
            url = stack.enter_context(postgres_store()).url
            progress(f"building a run of {steps:,} steps x {len(TAGS8)} tags with the {label} code")
            built[label] = [url, build_with(code, url, steps), steps]
        rows = []
        cases = [(label, code, False) for _ in range(rounds) for label, code in codes] + [("new", None, True)]
        for label, code, deferred in cases:
            progress(f"appends to the big run: {label}{', analysis deferred' if deferred else ''}")
            url, name, first = built[label]
            load, built[label][2] = big_appends(url, name, first, code, deferred, seconds, workdir)
            rows.append(load_row(case_label(label, 1, deferred), load) + split_ms(load))
        in_process = []
        for _ in range(2):
            for label, code in codes:
                progress(f"appends to the big run in process: {label}")
                url, name, first = built[label]
                (analysed, deferred), built[label][2] = big_in_process(url, name, first, code, 30)
                in_process.append([label, *(f"{x * 1000:.2f}" for x in analysed + deferred)])
    print(f"\n### 10-point appends to a run of {steps * len(TAGS8):,} points, one client at {BIG_RATE:.0f} req/s "
          f"({seconds:.0f} s{', each code in turn' if rounds > 1 else ''})\n")
    print(table(LOAD_HEADERS + ["analysed p50 ms", "analysed max ms", "others p99 ms"], rows))
    print("\n### 10-point appends to that run in process (no HTTP), medians, each code twice in turn\n")
    print(table(["code", "analysed wall ms", "analysed CPU ms", "deferred wall ms", "deferred CPU ms"], in_process))

if __name__ == "__main__":
    main()
