"""temper's test suite (a package so benchmarks can import `tests.models`)."""
