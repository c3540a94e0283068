"""Items, synthetic corpora, loaders and prompt templates."""

from vheads.data._items import OPTION_LETTERS, Box, Item

__all__ = ["Box", "Item", "OPTION_LETTERS"]
