"""Spark Connect suite (run with AIOSPARK_ISOLATED=connect)."""
