"""What a scan of an S3 logdir costs, in requests and bytes, counted on the server side: a
moto S3 server (in this process, on a loopback port) logs every HTTP request it answers.

Two cases, each beside what a reader without listing sizes or saved offsets does instead:

* an unchanged prefix of 1,000 runs (one event file each), scanned a second time: losswatch
  lists the prefix once and reads nothing; the alternative lists each run's directory and
  asks each object's size with a HEAD (a stat per file, as a local poll would), then reads
  nothing either;
* 1,000 new steps (4 scalars each) in one growing object (re-uploaded whole, as writers to
  S3 do): losswatch reads the new tail with one range request; the alternative reads the
  whole object again.

    .venv/bin/python bench/remote.py [RUNS]

Needs `pip install -e '.[test]'` (moto[server], s3fs).  Prints a markdown table.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.scan import scan  # noqa: E402
from app.store.db import open_store  # noqa: E402
from tests.eventfiles import file_version, record, scalar_event  # noqa: E402
from tests.service_helpers import free_port  # noqa: E402

TAGS = ("train/loss", "train/grad_norm", "train/lr", "eval/loss")


class Requests(logging.Handler):
    """Counts the requests the moto server answers, by method, from its access log."""

    LINE = re.compile(r'"(GET|PUT|HEAD|POST|DELETE) (\S+)')

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter = Counter()

    def emit(self, rec: logging.LogRecord) -> None:
        found = self.LINE.search(re.sub(r"\x1b\[[0-9;]*m", "", rec.getMessage()))  # werkzeug colours some lines
        if found:
            method, target = found.groups()
            listing = method == "GET" and re.search(r"[?&](list-type|prefix|delimiter)=", target) is not None
            self.counts["LIST" if listing else method] += 1

    def take(self) -> Counter:
        time.sleep(0.5)  # the server logs a request after answering it: let the last lines arrive
        counts, self.counts = self.counts, Counter()
        return counts


def events(first: int, steps: int, header: bool) -> bytes:
    out = [record(file_version())] if header else []
    for step in range(first, first + steps):
        out.append(b"".join(record(scalar_event(step, tag, 1.0 / (step + 1), 1.7e9 + step)) for tag in TAGS))
    return b"".join(out)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
    port = free_port()
    os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
    import boto3
    import s3fs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    counter = Requests()
    logging.getLogger("werkzeug").addHandler(counter)
    logging.getLogger("werkzeug").setLevel(logging.INFO)
    client = boto3.client("s3")
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    for i in range(runs):
        client.put_object(Bucket=bucket, Key=f"logs/run{i:04d}/events.out.tfevents.1", Body=events(0, 10, True))
    grow = events(0, 20_000, True)
    client.put_object(Bucket=bucket, Key="grow/r/events.out.tfevents.1", Body=grow)
    fs = s3fs.S3FileSystem()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/bench.db")
        scan(store, [f"s3://{bucket}/logs"])
        counter.take()
        started = time.perf_counter()
        outcome = scan(store, [f"s3://{bucket}/logs"])
        took = time.perf_counter() - started
        assert outcome.changed == 0
        rows.append((f"unchanged prefix, {runs} runs", "losswatch scan", counter.take(), 0, took))
        started = time.perf_counter()
        for directory in fs.ls(f"{bucket}/logs", refresh=True):
            for key in fs.ls(directory, refresh=True):
                fs.invalidate_cache(key)
                fs.info(key, refresh=True)
        took = time.perf_counter() - started
        rows.append((f"unchanged prefix, {runs} runs", "ls per run + HEAD per object", counter.take(), 0, took))

        scan(store, [f"s3://{bucket}/grow"])
        grown = grow + events(20_000, 1000, False)
        client.put_object(Bucket=bucket, Key="grow/r/events.out.tfevents.1", Body=grown)
        counter.take()
        started = time.perf_counter()
        outcome = scan(store, [f"s3://{bucket}/grow"])
        took = time.perf_counter() - started
        assert outcome.points == 4000, outcome.points
        rows.append(("1,000 new steps in one object", "losswatch scan", counter.take(), len(grown) - len(grow) + 4096, took))
        started = time.perf_counter()
        data = fs.cat_file(f"{bucket}/grow/r/events.out.tfevents.1")
        took = time.perf_counter() - started
        rows.append(("1,000 new steps in one object", "re-read the whole object", counter.take(), len(data), took))
        store.close()
    server.stop()
    print(f"## S3 scan cost, counted on the server (moto {_version('moto')}, s3fs {_version('s3fs')})\n")
    print("| case | reader | LIST | HEAD | GET (reads) | other | bytes read | seconds |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for case, reader, counts, nbytes, took in rows:
        other = sum(counts.values()) - counts["LIST"] - counts["HEAD"] - counts["GET"]
        print(f"| {case} | {reader} | {counts['LIST']} | {counts['HEAD']} | {counts['GET']} | {other} | {nbytes:,} | {took:.2f} |")
    print("\nbytes read: the range requested (losswatch: the new tail plus the 4 KiB seam it checks before the offset).")


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
