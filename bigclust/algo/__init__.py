"""Algorithms shared by every method family: affinities, spectral embedding, preprocessing, metrics, row-block streaming, k-means, kNN search."""
