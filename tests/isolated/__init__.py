"""Suites that need a process of their own (one JVM per kind of session); see tests/spark/test_isolated.py."""
