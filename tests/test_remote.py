"""Remote logdirs against a real S3 API: moto in server mode on a free loopback port, read
through the real s3fs/aiobotocore stack (endpoint from AWS_ENDPOINT_URL, as for MinIO).
GCS and Azure have no local server: their URL handling goes through fsspec's memory://
filesystem, which takes the same code path (listing, range reads, rewrites)."""

from __future__ import annotations

import os
import threading
import time
import uuid

import numpy as np
import pytest
from click.testing import CliRunner

from app.cli import main
from app.ingest import remote as remote_module
from app.ingest.problems import IngestError, Problem
from app.ingest.remote import RemoteLogdir, describe_error, url_contains
from app.ingest.sources import read_path
from app.scan import scan
from app.store import runs as stored_runs
from app.store.db import open_store
from tests.eventfiles import file_version, record, scalar_event
from tests.service_helpers import free_port, service, wait_for
from tests.test_scan import changes, loss_curve


class Moto:
    """A moto S3 server in this process, on a free loopback port; its buckets outlive a
    stop and start (the state is the process's), as a real service's do across an outage."""

    def __init__(self, server_class, port: int, client) -> None:
        self.server_class, self.port, self.client = server_class, port, client

    def start(self) -> None:
        self.server = self.server_class(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    def bucket(self) -> str:
        name = f"lw-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=name)
        return name

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=bucket, Key=key, Body=data)


@pytest.fixture(scope="module")
def s3():
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in [*env, "AWS_ENDPOINT_URL"]}
    os.environ.update(env)
    port = free_port()
    os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
    try:
        moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install 'moto[server]')")
        s3fs = pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'losswatch[s3]')")
        import boto3

        s3fs.S3FileSystem.clear_instance_cache()
        moto = Moto(moto_server.ThreadedMotoServer, port, boto3.client("s3"))
        moto.start()
        yield moto
        moto.stop()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield s
    s.close()


@pytest.fixture
def counted(monkeypatch):
    """Every listing and range read the scans make, by kind."""
    calls: list[str] = []
    real = remote_module.open_filesystem

    class Counting:
        def __init__(self, fs) -> None:
            self.fs = fs

        def __getattr__(self, name):
            return getattr(self.fs, name)

        def find(self, *args, **kwargs):
            calls.append("list")
            return self.fs.find(*args, **kwargs)

        def cat_file(self, *args, **kwargs):
            calls.append("read")
            return self.fs.cat_file(*args, **kwargs)

    monkeypatch.setattr(remote_module, "open_filesystem", lambda url, timeout: Counting(real(url, timeout)))
    return calls


def event_bytes(values, first_step: int = 0, header: bool = True) -> bytes:
    data = record(file_version()) if header else b""
    return data + b"".join(record(scalar_event(first_step + i, "train/loss", float(v))) for i, v in enumerate(values))


def test_a_growing_object_scanned_after_each_part_gives_every_point_once_and_each_alert_once(s3, store, counted):
    bucket = s3.bucket()
    v = loss_curve(3000)
    v[1000:1020] *= np.linspace(3, 1, 20)
    whole = event_bytes(v)
    url = f"s3://{bucket}/logs"
    cuts = [len(whole) // 3 + 7, 2 * len(whole) // 3 - 11, len(whole)]  # mid-record: a writer mid-flush
    points, seen = 0, []
    for cut in cuts:
        s3.put(bucket, "logs/r/events.out.tfevents.1", whole[:cut])  # re-uploaded whole, as writers to S3 do
        counted.clear()
        outcome = scan(store, [url])
        assert outcome.problems == []
        assert counted == ["list", "read"]  # one listing, one range read of the new tail
        points += outcome.points
        seen += changes(outcome)
    assert points == 3000
    assert seen == [("firing", "r", "loss_spike", 1000), ("resolved", "r", "loss_spike", 1000)]
    with store.read() as conn:
        [run] = stored_runs.find_runs(conn, "r", url)
        assert run.points == 3000
    counted.clear()
    assert scan(store, [url]).changed == 0
    assert counted == ["list"]  # unchanged: the listing's size and ETag say so, no read


def test_a_rewritten_object_replaces_its_runs_points(s3, store):
    bucket = s3.bucket()
    url = f"s3://{bucket}/logs"
    s3.put(bucket, "logs/r/events.out.tfevents.1", event_bytes(np.full(100, 2.0)))
    assert scan(store, [url]).points == 100
    s3.put(bucket, "logs/r/events.out.tfevents.1", event_bytes(np.full(150, 3.0), header=False))  # other bytes, longer
    outcome = scan(store, [url])
    assert [p.reason for p in outcome.problems] == [
        "rewritten since it was last read (the bytes before the offset read last time changed): "
        "the run is read again from the start"]
    with store.read() as conn:
        [run] = stored_runs.find_runs(conn, "r", url)
        assert run.points == 150


def test_an_object_that_shrank_is_a_rewrite(s3, store):
    bucket = s3.bucket()
    url = f"s3://{bucket}/logs"
    s3.put(bucket, "logs/r/events.out.tfevents.1", event_bytes(np.full(100, 2.0)))
    scan(store, [url])
    s3.put(bucket, "logs/r/events.out.tfevents.1", event_bytes(np.full(40, 2.0)))
    outcome = scan(store, [url])
    assert outcome.problems[0].reason.startswith("rewritten since it was last read (now ")
    with store.read() as conn:
        assert stored_runs.find_runs(conn, "r", url)[0].points == 40


@pytest.mark.slow
def test_a_thousand_small_objects_then_an_unchanged_prefix_costs_one_listing(s3, store, counted):
    bucket = s3.bucket()
    for i in range(1000):
        s3.put(bucket, f"logs/run{i:04d}/events.out.tfevents.1", event_bytes(np.full(5, 1.0 + i % 7)))
    url = f"s3://{bucket}/logs"
    first = scan(store, [url])
    assert (first.runs, first.changed, first.points, first.problems) == (1000, 1000, 5000, [])
    counted.clear()
    again = scan(store, [url])
    assert (again.runs, again.changed, again.points) == (1000, 0, 0)
    assert counted == ["list"]


def test_a_missing_bucket_is_one_line_and_the_other_paths_are_still_scanned(s3, store, tmp_path):
    bucket = s3.bucket()
    s3.put(bucket, "logs/r/events.out.tfevents.1", event_bytes(np.full(10, 2.0)))
    missing = f"s3://lw-missing-{uuid.uuid4().hex[:8]}/logs"
    outcome = scan(store, [missing, f"s3://{bucket}/logs"])
    assert [str(p) for p in outcome.problems] == [f"{missing}: no such bucket or object"]
    assert outcome.failed == [missing] and outcome.points == 10
    result = CliRunner().invoke(main, ["scan", missing, "--db", f"sqlite:///{tmp_path / 'cli.db'}"])
    assert result.exit_code == 2
    assert result.stderr == f"losswatch: {missing}: no such bucket or object\n"


def test_analyze_reads_a_bucket_prefix_like_a_local_logdir(s3):
    bucket = s3.bucket()
    s3.put(bucket, "exp/a/events.out.tfevents.1", event_bytes(np.full(10, 2.0)))
    s3.put(bucket, "exp/hf/checkpoint-20/trainer_state.json", b'{"log_history": [{"step": 10, "loss": 1.5}, {"step": 20, "loss": 1.4}]}')
    s3.put(bucket, "exp/hf/checkpoint-10/trainer_state.json", b'{"log_history": [{"step": 10, "loss": 1.5}]}')
    read = read_path(f"s3://{bucket}/exp/")
    assert {name: len(run.points) for name, run in read.runs.items()} == {"a": 10, "hf": 2}
    assert read.problems == []
    result = CliRunner().invoke(main, ["runs", f"s3://{bucket}/exp"])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == f"s3://{bucket}/exp :: a  (10 points, 0 rollbacks)  [TensorBoard event files (1 file)]"


def test_a_url_naming_one_event_object_reads_that_object_alone(s3, store, counted):
    bucket = s3.bucket()
    whole = event_bytes(loss_curve(400))
    s3.put(bucket, "logs/r1/events.out.tfevents.1", whole[: len(whole) // 2])
    s3.put(bucket, "logs/r2/events.out.tfevents.1", event_bytes(np.full(10, 2.0)))  # beside it: not read
    url = f"s3://{bucket}/logs/r1/events.out.tfevents.1"
    read = read_path(url)
    assert ({name: len(run.points) for name, run in read.runs.items()}, read.problems) == ({"r1": 200}, [])
    counted.clear()
    first = scan(store, [url])
    assert (first.runs, first.points, first.problems) == (1, 200, [])
    s3.put(bucket, "logs/r1/events.out.tfevents.1", whole)
    counted.clear()
    grown = scan(store, [url])
    assert (grown.points, grown.problems, counted) == (200, [], ["list", "read"])  # only the new tail
    counted.clear()
    assert scan(store, [url]).changed == 0 and counted == ["list"]
    with store.read() as conn:
        assert [run.points for run in stored_runs.find_runs(conn, "r1", url)] == [400]


def test_a_url_naming_one_jsonl_object_reads_it_as_its_run(s3):
    bucket = s3.bucket()
    s3.put(bucket, "exp/json/bad_batch.jsonl", b'{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\n')
    s3.put(bucket, "exp/json/metrics.jsonl", b'{"step": 1, "loss": 5.0}\n')
    url = f"s3://{bucket}/exp/json/bad_batch.jsonl"
    read = read_path(url)
    assert ({name: len(run.points) for name, run in read.runs.items()}, read.problems) == ({"bad_batch": 2}, [])
    assert {name: len(run.points) for name, run in read_path(f"s3://{bucket}/exp/json/metrics.jsonl").runs.items()} == {"json": 1}
    result = CliRunner().invoke(main, ["runs", url])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == f"{url} :: bad_batch  (2 points, 0 rollbacks)  [JSON/CSV loss log (1 file)]"


def test_a_key_that_is_both_an_object_and_a_prefix_is_read_as_the_prefix(s3):
    bucket = s3.bucket()
    s3.put(bucket, "exp", b'{"step": 1, "loss": 2.0}\n')
    s3.put(bucket, "exp/r/events.out.tfevents.1", event_bytes(np.full(10, 2.0)))
    assert {name: len(run.points) for name, run in read_path(f"s3://{bucket}/exp").runs.items()} == {"r": 10}


def test_a_server_stopped_mid_scan_then_restarted_loses_and_duplicates_nothing(s3, store, monkeypatch):
    monkeypatch.setattr(remote_module, "BACKOFF", 0.01)
    bucket = s3.bucket()
    url = f"s3://{bucket}/logs"
    for name in ("a", "b", "c"):
        s3.put(bucket, f"logs/{name}/events.out.tfevents.1", event_bytes(loss_curve(200)))
    stopped = []

    def stop_after_the_first_run(done: int, total: int) -> None:
        if done == 1 and not stopped:
            s3.stop()
            stopped.append(True)

    try:
        outcome = scan(store, [url], progress=stop_after_the_first_run)
    finally:
        s3.start()
    assert outcome.points == 200
    assert {p.source.rsplit("/", 2)[-2] for p in outcome.problems} == {"b", "c"}
    assert all(p.reason.startswith("cannot connect") and p.reason.endswith("(after 3 attempts)") for p in outcome.problems)
    after = scan(store, [url])
    assert (after.points, after.problems) == (400, [])
    with store.read() as conn:
        assert {name: stored_runs.find_runs(conn, name, url)[0].points for name in "abc"} == {"a": 200, "b": 200, "c": 200}


# --- without a server: errors, URLs, memory:// -------------------------------------------


@pytest.mark.parametrize("error, reason, transient", [
    (PermissionError("Access Denied"), "access denied", False),
    (FileNotFoundError("The specified bucket does not exist"), "no such bucket or object", False),
    (OSError(16, "Please reduce your request rate. SlowDown"), "throttled by the storage service", True),
    (TimeoutError("read timeout"), "timed out", True),
])
def test_each_failure_is_named_in_words(error, reason, transient):
    assert describe_error(error) == (reason, transient)


class Scripted:
    """A filesystem whose listing fails as scripted, then answers."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures

    def _strip_protocol(self, url: str) -> str:
        return url.split("://", 1)[1]

    def find(self, root, detail):
        if self.failures:
            raise self.failures.pop(0)
        return {f"{root}/r/events.out.tfevents.1": {"type": "file", "size": 0, "ETag": "x"}}


def test_throttling_is_retried_with_backoff_and_denial_is_not():
    waits = []
    throttled = RemoteLogdir("s3://b/logs", Scripted([OSError(16, "SlowDown")] * 2), sleep=waits.append)
    assert list(throttled.list()) == ["s3://b/logs/r/events.out.tfevents.1"]
    assert waits == [0.5, 1.0]
    denied = RemoteLogdir("s3://b/logs", Scripted([PermissionError("Access Denied")]), sleep=waits.append)
    with pytest.raises(IngestError) as raised:
        denied.list()
    assert raised.value.problems == [Problem("s3://b/logs", "access denied")] and waits == [0.5, 1.0]


class Hanging(Scripted):
    """Lists one object, then never answers a read."""

    def __init__(self) -> None:
        super().__init__([])
        self.release = threading.Event()

    def cat_file(self, path, start, end):
        self.release.wait(30)
        return b""


def test_a_read_that_hangs_times_out_is_retried_and_reported_as_one_line():
    hanging = Hanging()
    remote = RemoteLogdir("gs://b/logs", hanging, timeout=0.2, sleep=lambda s: None)
    try:
        [url] = remote.list()
        started = time.monotonic()
        with pytest.raises(IngestError) as raised:
            remote.read(url, 0, 10)
        assert time.monotonic() - started < 5
        assert raised.value.problems == [Problem(url, "timed out (after 3 attempts)")]
    finally:
        hanging.release.set()


def test_url_prefixes_hold_by_path_segment():
    assert url_contains("s3://b/logs", "s3://b/logs/a/b")
    assert url_contains("s3://b/logs/", "s3://b/logs")
    assert not url_contains("s3://b/logs", "s3://b/logs2")
    assert not url_contains("s3://b/logs", "gs://b/logs/a")


def test_a_backend_that_is_not_installed_says_which_extra_to_install(monkeypatch):
    import fsspec

    def missing(*args, **kwargs):
        raise ImportError("Install gcsfs to access Google Storage")

    monkeypatch.setattr(fsspec.core, "url_to_fs", missing)
    result = CliRunner().invoke(main, ["analyze", "gs://bucket/logs"])
    assert result.exit_code == 2
    assert result.stderr == "losswatch: gs://bucket/logs: cannot read gs:// URLs: pip install 'losswatch[gcs]'\n"


def test_memory_filesystem_grows_and_rewrites_like_gcs(store):
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"memory://lw-{uuid.uuid4().hex[:8]}"
    v = loss_curve(600)
    whole = event_bytes(v)
    fs.pipe(f"{root}/run/events.out.tfevents.1", whole[: len(whole) // 2])
    fs.pipe(f"{root}/run/metrics.csv", b"step,val_loss\n0,1.5\n1,1.4\n")
    first = scan(store, [root])
    assert first.problems == [] and first.runs == 2
    fs.pipe(f"{root}/run/events.out.tfevents.1", whole)  # a new generation, longer, same first bytes
    grown = scan(store, [root])
    assert grown.problems == [] and first.points + grown.points == 600 + 2
    fs.pipe(f"{root}/run/events.out.tfevents.1", event_bytes(v[:50] + 1))  # a new generation, shorter
    rewritten = scan(store, [root])
    assert rewritten.points == 50 and "rewritten" in rewritten.problems[0].reason
    with store.read() as conn:
        assert stored_runs.find_runs(conn, "run", root)[0].points == 50


def test_a_text_object_rewritten_at_the_same_size_is_read_again(store):
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"memory://lw-{uuid.uuid4().hex[:8]}"
    fs.pipe(f"{root}/v0/metrics.csv", b"step,train_loss\n0,1.5\n1,1.4\n")
    assert scan(store, [root]).points == 2
    assert scan(store, [root]).changed == 0
    fs.pipe(f"{root}/v0/metrics.csv", b"step,train_loss\n0,1.5\n1,9.9\n")  # a new generation, same size
    assert (scan(store, [root]).changed, scan(store, [root]).changed) == (1, 0)
    with store.read() as conn:
        [run] = stored_runs.find_runs(conn, "v0", root)
        assert stored_runs.load_tag_writes(conn, run.id, "train_loss").value.tolist() == [1.5, 9.9]


def test_the_service_takes_urls_under_a_url_root_only(tmp_path):
    db = f"sqlite:///{tmp_path / 'store.db'}"
    with service(db, allowed_roots=("s3://bucket/logs", str(tmp_path))) as client:
        assert client.post("/v1/logdirs", json={"path": "s3://bucket/logs/exp1/"}).status_code == 201
        refused = client.post("/v1/logdirs", json={"path": "s3://bucket/logs2"})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden_path"
        assert client.post("/v1/logdirs", json={"path": "gs://bucket/logs/exp1"}).status_code == 403
        assert client.post("/v1/logdirs", json={"path": "s3://bucket/logs/exp1/sub"}).status_code == 409
        assert [d["path"] for d in client.get("/v1/logdirs").json()] == ["s3://bucket/logs/exp1"]


def test_the_services_poller_scans_a_watched_url(tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"memory://lw-{uuid.uuid4().hex[:8]}"
    fs.pipe(f"{root}/exp1/r/events.out.tfevents.1", event_bytes(loss_curve(300)))
    with service(f"sqlite:///{tmp_path / 'store.db'}", allowed_roots=(root,), background=True, poll_interval=600) as client:
        assert client.post("/v1/logdirs", json={"path": f"{root}/exp1"}).status_code == 201
        wait_for(lambda: [(r["name"], r["points"]) for r in client.get("/v1/runs").json()] == [("r", 300)])
        [watched] = wait_for(lambda: [d for d in client.get("/v1/logdirs").json() if d["last_scan_at"]])
        assert watched["last_error"] is None
