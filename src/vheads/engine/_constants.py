"""The engine's names that configs and CLI flags are checked against, torch-free (so a bad
``rows`` flag or config key is refused before torch loads)."""

#: the query positions an intervention applies at (DESIGN.md "Row group")
ROW_GROUPS = ("all", "image", "question", "last")
