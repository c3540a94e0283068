"""``python -m vheads`` runs the ``vheads`` command."""

from vheads.cli import app

app(prog_name="vheads")
