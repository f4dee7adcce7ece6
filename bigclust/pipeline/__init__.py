"""The pipeline: config schema and parsing, the method registry, generic stages, the zarr store, the runner."""
