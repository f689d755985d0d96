"""The installed distribution's version (what map files and ``ridgefill --version`` name)."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ridgefill")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.1.0+src"
