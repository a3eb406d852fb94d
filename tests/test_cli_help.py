"""The CLI's help: every command's summary whole in the list, an example under each --help."""

from __future__ import annotations

import click
from click.testing import CliRunner

from app.cli import main


def commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in group.commands.items():
        out.append((prefix + name, cmd))
        if isinstance(cmd, click.Group):
            out += commands(cmd, prefix + name + " ")
    return out


def test_the_command_list_shows_whole_summaries():
    text = CliRunner().invoke(main, ["--help"], terminal_width=80).output
    listed = text[text.index("Commands:"):]
    assert "..." not in listed
    assert "below where the run logs them." in " ".join(listed.split())  # the end of plot's summary: wrapped, not cut


def test_every_command_help_ends_with_an_example_of_itself():
    for path, _ in commands(main):
        text = CliRunner().invoke(main, [*path.split(), "--help"]).output
        example = text[text.index("Example:"):].splitlines()[1].strip()
        assert example.startswith(f"losswatch {path}" if " " in path else f"losswatch {path.split()[-1]}"), path
