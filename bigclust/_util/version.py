"""The package version (here, so that modules that record it never import the package root)."""
__version__ = "0.1.0"
