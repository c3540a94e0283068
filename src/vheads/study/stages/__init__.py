"""The study's stages, one module each; each registers itself with
:func:`vheads.study._stage.register_stage` when imported (:func:`vheads.study._stage.registered_stages`
imports them all)."""
