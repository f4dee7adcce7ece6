"""Reports of a run: tables, label files, figures and the comparisons with the papers."""
