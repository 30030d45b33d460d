"""Hierarchy pipeline: segmentation, extraction, theme clustering and one-call ingest."""
