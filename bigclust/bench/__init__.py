"""`bigclust bench`: speed and memory against references measured in the same run (one module per command).

``bbs``, ``ooc``, ``sparse``, ``knn``, ``nmf``, ``scale`` and ``subspace`` are
the commands; all measure through :mod:`bigclust.bench._measure` (the machine,
one timing helper, one peak-RSS sampler) and print through :func:`format_report`.
"""
from bigclust.bench._measure import format_report

__all__ = ["format_report"]
