"""Data sets: readers of the raw formats and the registry of named data sets.

>>> from bigclust.datasets import open_dataset
>>> src = open_dataset("letter-a-e")                      # doctest: +SKIP
>>> for X, y in src.iter_chunks(1000): ...                # doctest: +SKIP

Nothing heavy is imported here (scipy, scikit-learn and the stemmer are
imported by the functions that need them), so ``import bigclust.datasets``
stays fast.
"""
from bigclust.datasets.readers import DatasetInfo, Source
from bigclust.datasets.registry import default_root, get_info, list_datasets, open_dataset, open_file

__all__ = ["DatasetInfo", "Source", "default_root", "get_info", "list_datasets",
           "open_dataset", "open_file"]
