"""Input and output: readers per format into one canonical polars frame; atomic writers."""

from contrast_audit.io.atomic import write_atomic
from contrast_audit.io.load import LoadResult, load_rows

__all__ = ["LoadResult", "load_rows", "write_atomic"]
