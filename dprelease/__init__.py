"""dprelease: declarative, census-style batch releases of differentially private tables.

Importing the package is cheap and never imports Prefect; only the orchestration layer does.
:func:`read_release` (a published release as pandas DataFrames, :mod:`dprelease.publish.reading`) is
imported on first use, so that the CLI does not pay for importing pandas.
"""

from typing import TYPE_CHECKING

__version__ = "0.3.1"  # pyproject.toml's; 0.2 on writes and reads manifest format 2 only; 0.3: JSON keys by unit; 0.3.1: na_values
__all__ = ["__version__", "read_release"]

if TYPE_CHECKING:
    from dprelease.publish.reading import read_release
else:
    def __getattr__(name: str):  # PEP 562: read_release is imported on first use
        if name == "read_release":
            from dprelease.publish.reading import read_release

            return read_release
        raise AttributeError(f"module 'dprelease' has no attribute {name!r}")
