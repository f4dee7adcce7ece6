"""Helpers every layer may use: errors, convergence warnings, Numba set-up, progress, memory planning, hashing, version."""
