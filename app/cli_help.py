"""The CLI's help as a person reads it: every command listed with its whole summary (click
cuts them at the terminal's width, mid-sentence), and an example under each command's
`--help`.  Kept here so the commands in `app/cli.py` stay about what they do."""

from __future__ import annotations

import click

# By command, or by "group command" for a group's commands; \b keeps click from re-wrapping
# the example lines.
EXAMPLES = {
    "analyze": "losswatch analyze runs/ --fail-on critical\nlosswatch analyze run.json --format json > alerts.json",
    "export": "losswatch export runs/exp1 --format csv -o exp1.csv",
    "plot": "losswatch plot runs/ --run exp1 -o exp1.png",
    "runs": "losswatch runs runs/",
    "scan": "losswatch scan runs/ --db sqlite:///lw.db --webhook https://hooks.example/alerts",
    "serve": "losswatch serve --allow-root /data/runs --db postgresql://lw@db/lw",
    "token": "losswatch token create ci --scope write\nlosswatch token list\nlosswatch token revoke ci",
    "token create": "losswatch token create ci --scope write",
    "token list": "losswatch token list --db sqlite:///lw.db",
    "token revoke": "losswatch token revoke ci",
    "silence": "losswatch silence add --run 'rl-*' --kind loss_spike --duration 2h\nlosswatch silence list\nlosswatch silence expire 3",
    "silence add": "losswatch silence add --run 'rl-*' --kind loss_spike --duration 2h --comment 'noisy RL runs'",
    "silence list": "losswatch silence list --db sqlite:///lw.db",
    "silence expire": "losswatch silence expire 3",
}


class HelpfulGroup(click.Group):
    """A group whose command list shows each summary whole (wrapped, not cut) and whose
    commands' help ends with an example from `EXAMPLES`."""

    group_class = type  # subgroups (`token`) are HelpfulGroups too

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        name = name or cmd.name or ""
        example = EXAMPLES.get(f"{self.name} {name}", EXAMPLES.get(name))  # a subcommand by its path
        if example is not None and cmd.epilog is None:
            cmd.epilog = "\b\nExample:\n" + "\n".join("  " + line for line in example.splitlines())
        super().add_command(cmd, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, cmd.get_short_help_str(limit=1_000)) for name in self.list_commands(ctx)
                if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
