"""dprelease: declarative, census-style batch releases of differentially private tables.

Importing the package is cheap and never imports Prefect; only the orchestration layer does.
"""

__version__ = "0.1.0"
