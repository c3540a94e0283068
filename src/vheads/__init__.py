"""vheads: find the visual attention heads of a vision-language model and test what they do.

See DESIGN.md for vocabulary. The public API is re-exported from each subpackage.
"""

__version__ = "0.1.0"
