"""`losswatch serve` start-up errors: one line on stderr and exit 2, as the README says."""

from __future__ import annotations

import socket

from click.testing import CliRunner

from app.cli import main


def test_a_busy_port_is_exit_2_with_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(main, ["serve", "--port", str(port), "--db", f"sqlite:///{tmp_path / 's.db'}"])
    assert result.exit_code == 2
    assert result.stderr == f"losswatch: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_a_host_that_is_not_this_machine_is_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["serve", "--host", "192.0.2.1", "--insecure", "--db", f"sqlite:///{tmp_path / 's.db'}"])
    assert result.exit_code == 2
    assert result.stderr.endswith("losswatch: cannot listen on 192.0.2.1:8000: Cannot assign requested address\n")
