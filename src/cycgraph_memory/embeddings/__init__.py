"""Embedding providers: dependency-free hashing, and an optional local model."""
