"""A bounded fuzzing run on every CI: mutated real models and JSON bodies against a live server get
no 5xx, leave the server alive and store nothing when refused (the long run is `python -m bench.fuzz`)."""

from __future__ import annotations

import httpx

from bench.fuzz import fuzz, seed_models, stored_state
from tests.service.api.server import LiveServer

CASES = 150


def test_fuzzed_requests_get_no_5xx_and_store_nothing_when_refused(start_server) -> None:  # type: ignore[no-untyped-def]
    server: LiveServer = start_server(TEMPER_EMBEDDED_WORKER="false")
    key = server.create_key("fuzzer")
    seeds = seed_models()[:3]  # the small ones: the bounded run stays quick
    admin = server.create_key("ops", admin=True)
    tally = fuzz(
        server.url, key, seeds, cases=CASES, seed=11, stored=lambda: stored_state(server), admin_key=admin
    )
    summary = tally.summary()
    assert tally.server_errors == [], summary
    assert tally.stored_on_refusal == [], summary
    assert summary["by_class"].get("4xx", 0) > CASES // 3  # the mutations do reach the checks
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
