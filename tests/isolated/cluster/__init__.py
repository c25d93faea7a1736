"""Standalone-cluster suite (run with AIOSPARK_ISOLATED=cluster)."""
