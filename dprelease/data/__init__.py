"""Data: load confidential records, encode them to declared domains, count them."""

from dprelease.data.count import ExactCounts, count_exact
from dprelease.data.histogram import histogram, place_totals, where_mask
from dprelease.data.load import Encoded, encode, file_fingerprint, needed_columns

__all__ = ["Encoded", "ExactCounts", "count_exact", "encode", "file_fingerprint", "histogram",
           "needed_columns", "place_totals", "where_mask"]
