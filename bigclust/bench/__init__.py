"""`bigclust bench`: speed and memory against references measured in the same run (one module per command)."""
