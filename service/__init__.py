"""temper's service layer: HTTP API, jobs, workers, CLI and client; the only layer wiring the others."""
