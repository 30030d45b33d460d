"""Semantic extractors: simple, rule-based and LLM-backed."""
