"""Tests of the test infrastructure (tests/support) and of the demo's own service and figures."""
