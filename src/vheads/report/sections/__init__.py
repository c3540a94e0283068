"""The report's sections, one module each; every module registers its section with
:func:`vheads.report._registry.section` when imported (:func:`vheads.report._registry.registered_sections`
imports them all). Adding a section is adding a module here."""
