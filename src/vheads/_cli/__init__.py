"""The ``vheads`` command: a thin layer over the library (each command calls one function).

One module per command (``vheads._cli.evaluate``, …); ``discover``, ``overlap``, ``data`` and
``tiny`` live beside their library code and are mounted here. This package and the command
modules import typer and the standard library only; each command imports the library it
needs (torch, transformers) in its body, so ``vheads --help``, ``vheads CMD --help`` and a
mistyped flag answer at once (``tests/test_cli_startup.py``). Every command runs inside
:func:`~vheads._cli._common.fail_clearly`: an error a user can act on is one line, exit 2.
"""

from __future__ import annotations

import typer
import typer.core

from vheads._cli import audit, causal_map, compare, doctor, evaluate, export, models, plan, report, study
from vheads._cli._common import one_line_errors

#: the order ``vheads --help`` lists the commands in: a study's workflow, then the tools around it
COMMAND_ORDER = ("study", "discover", "overlap", "evaluate", "audit", "causal-map", "report", "export", "compare",
                 "plan", "doctor", "models", "data", "tiny")


class _WorkflowOrder(typer.core.TyperGroup):
    def list_commands(self, ctx) -> list[str]:
        rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
        return sorted(super().list_commands(ctx), key=lambda name: (rank.get(name, len(rank)), name))


app = typer.Typer(cls=_WorkflowOrder, add_completion=False, no_args_is_help=True,
                  help="Find and test the visual attention heads of VLMs.")


@app.callback()
def main() -> None:
    """vheads: discover visual heads, test necessity (NCS) and steerability (CERS) against random controls."""


for _command in (models.models, study.study, evaluate.evaluate, audit.audit, doctor.doctor, plan.plan, report.report,
                 export.export, compare.compare):
    app.command()(_command)
app.command("causal-map")(causal_map.causal_map)


def _mount_optional() -> None:
    """Sub-commands that live beside their library code."""
    try:
        from vheads.tiny import app as tiny_app

        app.add_typer(tiny_app, name="tiny", help="The built-in tiny model: train and evaluate it.")
    except ImportError:
        pass
    try:
        from vheads.data import data_app

        app.add_typer(data_app, name="data", help="Preview the items vheads builds (contact sheets).")
    except ImportError:
        pass
    try:
        from vheads.discovery import discover_command, overlap_command

        app.command("discover")(discover_command)
        app.command("overlap")(overlap_command)
    except ImportError:
        pass


_mount_optional()
for _info in [*app.registered_commands, *(c for g in app.registered_groups for c in g.typer_instance.registered_commands)]:
    _info.callback = one_line_errors(_info.callback)

__all__ = ["COMMAND_ORDER", "app", "main"]
