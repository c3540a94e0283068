"""Items, synthetic corpora, loaders and prompt templates."""

from vheads.data._cli import app as data_app
from vheads.data._items import OPTION_LETTERS, Box, Item
from vheads.data._templates import DEFAULT_TEMPLATES, PLACEHOLDERS, TemplateError, Templates, check_vocabulary, templates_from_dict

__all__ = ["Box", "DEFAULT_TEMPLATES", "Item", "OPTION_LETTERS", "PLACEHOLDERS", "TemplateError", "Templates", "check_vocabulary",
           "data_app", "templates_from_dict"]
