"""Items, synthetic corpora, loaders and prompt templates."""

from vheads.data._cli import app as data_app
from vheads.data._items import OPTION_LETTERS, Box, Item

__all__ = ["Box", "Item", "OPTION_LETTERS", "data_app"]
