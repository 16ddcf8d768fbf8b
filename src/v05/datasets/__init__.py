"""Datasets bundled with v05 and their loaders (numpy only)."""

from v05.datasets.v0 import V0Dataset, V0Rows, bundled_v0_path, load_v0

__all__ = ["V0Dataset", "V0Rows", "bundled_v0_path", "load_v0"]
