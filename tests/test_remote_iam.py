"""Access denied by a real S3 API: a moto server of its own, in a process of its own,
enforcing IAM.  moto checks signatures and policies once it has answered
INITIAL_NO_AUTH_ACTION_COUNT requests (an environment variable read when the server
starts): the setup below makes exactly that many, unauthenticated, then every request must
be signed by an IAM user's key and allowed by its policy, as on AWS."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from click.testing import CliRunner

from app.cli import main
from app.scan import scan
from app.store import runs as stored_runs
from app.store.db import open_store
from tests.service_helpers import free_port
from tests.test_remote import event_bytes

OPEN, NO_LIST, NO_READ = "lw-open", "lw-no-list", "lw-no-read"
# Allowed everything, except listing one bucket and reading the objects of another.
POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
        {"Effect": "Deny", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{NO_LIST}"},
        {"Effect": "Deny", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{NO_READ}/*"},
    ],
}
SETUP_REQUESTS = 9  # 3 buckets, 3 objects, the user, its policy, its key: then auth is on
OBJECT = "logs/r/events.out.tfevents.1"


@dataclass(frozen=True)
class Keys:
    endpoint: str
    access_key: str
    secret_key: str


def _moto_server(port: int) -> subprocess.Popen:
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}
    return subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def _wait_listening(port: int, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the moto server exited with {process.returncode}")
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        time.sleep(0.1)
    raise AssertionError("the moto server did not listen in time")


@pytest.fixture(scope="module")
def iam_s3() -> Iterator[Keys]:
    """The server, its buckets and objects, and the key of the user the policy binds."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install 'moto[server]')")
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'losswatch[s3]')")
    import boto3

    port = free_port()
    process = _moto_server(port)
    try:
        _wait_listening(port, process)
        endpoint = f"http://127.0.0.1:{port}"
        anonymous = {"endpoint_url": endpoint, "region_name": "us-east-1",
                     "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        s3, iam = boto3.client("s3", **anonymous), boto3.client("iam", **anonymous)
        for bucket in (OPEN, NO_LIST, NO_READ):
            s3.create_bucket(Bucket=bucket)
            s3.put_object(Bucket=bucket, Key=OBJECT, Body=event_bytes(np.full(10, 2.0)))
        iam.create_user(UserName="trainer")
        iam.put_user_policy(UserName="trainer", PolicyName="logs", PolicyDocument=json.dumps(POLICY))
        key = iam.create_access_key(UserName="trainer")["AccessKey"]
        yield Keys(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def as_user(iam_s3: Keys, monkeypatch) -> Keys:
    """The user's key and the server's endpoint, through the standard environment chain."""
    import s3fs

    for name, value in {"AWS_ACCESS_KEY_ID": iam_s3.access_key, "AWS_SECRET_ACCESS_KEY": iam_s3.secret_key,
                        "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": iam_s3.endpoint}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    s3fs.S3FileSystem.clear_instance_cache()  # a cached filesystem holds other credentials
    yield iam_s3
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield s
    s.close()


def test_the_server_enforces_iam(iam_s3):
    import boto3
    from botocore.exceptions import ClientError

    anonymous = boto3.client("s3", endpoint_url=iam_s3.endpoint, region_name="us-east-1",
                             aws_access_key_id="testing", aws_secret_access_key="testing")
    with pytest.raises(ClientError, match="InvalidAccessKeyId"):
        anonymous.list_objects_v2(Bucket=OPEN)


def test_a_denied_listing_and_a_denied_read_are_one_line_each_and_the_open_bucket_is_stored(as_user, store):
    no_list, no_read, open_ = (f"s3://{b}/logs" for b in (NO_LIST, NO_READ, OPEN))
    outcome = scan(store, [no_list, no_read, open_])
    assert [str(p) for p in outcome.problems] == [
        f"{no_list}: access denied", f"s3://{NO_READ}/{OBJECT}: access denied"]
    assert outcome.failed == [no_list]
    assert outcome.points == 10
    again = scan(store, [no_list, no_read, open_])  # the unread object is tried again, not taken as read
    assert [str(p) for p in again.problems] == [str(p) for p in outcome.problems] and again.points == 0
    with store.read() as conn:
        assert stored_runs.find_runs(conn, "r", open_)[0].points == 10
        assert stored_runs.find_runs(conn, "r", no_read) == []  # nothing read, nothing stored


def test_the_cli_says_access_denied_in_one_line_and_scans_the_rest(as_user, tmp_path):
    no_list, open_ = f"s3://{NO_LIST}/logs", f"s3://{OPEN}/logs"
    result = CliRunner().invoke(main, ["scan", no_list, open_, "--db", f"sqlite:///{tmp_path / 'cli.db'}"])
    assert result.exit_code == 2
    assert result.stderr == f"losswatch: {no_list}: access denied\n"
    assert result.stdout == "0 changes in 1 run (1 with new data, 10 new points)\n"
