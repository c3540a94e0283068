"""The report's sections, one module each; every module registers its section with
:func:`vheads.report.section` when imported (:func:`vheads.report.registered_sections`
imports them all). Adding a section is adding a module here."""
