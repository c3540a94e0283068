"""Items, synthetic corpora, loaders and prompt templates."""

from vheads.data._cli import app as data_app
from vheads.data._items import OPTION_LETTERS, Box, Item
from vheads.data._templates import (DEFAULT_TEMPLATES, NATURAL_TEMPLATES, PLACEHOLDERS, TemplateError, Templates, check_vocabulary,
                                    default_templates, is_builtin_tiny, templates_from_dict, templates_name)

__all__ = ["Box", "DEFAULT_TEMPLATES", "Item", "NATURAL_TEMPLATES", "OPTION_LETTERS", "PLACEHOLDERS", "TemplateError", "Templates",
           "check_vocabulary", "data_app", "default_templates", "is_builtin_tiny", "templates_from_dict", "templates_name"]
