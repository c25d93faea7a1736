"""Testing toolkit: real servers on 127.0.0.1 for tests, benchmarks and the demo."""
