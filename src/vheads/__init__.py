"""vheads: find the visual attention heads of a vision-language model and test what they do.

See DESIGN.md for vocabulary. The public API is re-exported from each subpackage.
``__version__`` comes from the installed package's metadata (``pyproject.toml``); head-set
files and run stores record it.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("vheads")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
