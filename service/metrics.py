"""Prometheus metrics: request latency by route, and the job table read at scrape time.

Each app has its own registry (tests start several apps in one process). Job gauges are not kept in
memory: they are counted in the database when Prometheus scrapes, so they are right across API
restarts and with several API processes, and they see what separate workers did.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATES = ("queued", "running", "succeeded", "failed", "cancelled")
KINDS = ("compile", "tune")
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class JobCollector(Collector):
    """Jobs by (kind, state), queue depth and tuning trials measured, counted at scrape time."""

    def __init__(
        self,
        count_jobs: Callable[[], Mapping[tuple[str, str], int]],
        count_trials: Callable[[], int],
    ) -> None:
        self._count_jobs = count_jobs
        self._count_trials = count_trials

    def describe(self) -> Iterator[Metric]:
        """The families without values (the registry asks at registration, before a database exists)."""
        return self._families({}, 0)

    def collect(self) -> Iterator[Metric]:
        return self._families(self._count_jobs(), self._count_trials())

    def _families(self, counts: Mapping[tuple[str, str], int], trials_measured: int) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("temper_jobs", "Jobs by kind and state.", labels=["kind", "state"])
        queue = GaugeMetricFamily("temper_queue_depth", "Jobs waiting for a worker.", labels=["kind"])
        for kind in KINDS:
            for state in STATES:
                jobs.add_metric([kind, state], counts.get((kind, state), 0))
            queue.add_metric([kind], counts.get((kind, "queued"), 0))
        yield jobs
        yield queue
        trials = CounterMetricFamily(
            "temper_trials_measured", "Tuning candidates measured (records in the database)."
        )
        trials.add_metric([], trials_measured)
        yield trials


class Metrics:
    """The app's registry and its request instruments."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "temper_http_requests",
            "HTTP requests by method, route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "temper_http_request_duration_seconds",
            "Time from request start to the end of the response, by route.",
            ["method", "route"],
            buckets=_BUCKETS,
            registry=self.registry,
        )

    def add_collector(self, collector: Collector) -> None:
        self.registry.register(collector)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _route(scope: Scope) -> str:
    """The route's path template (bounded label values), or 'unmatched'."""
    route: Any = scope.get("route")
    return str(getattr(route, "path", "unmatched"))


class MetricsMiddleware:
    """Times every HTTP request until its last body byte is sent."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            route, method = _route(scope), scope.get("method", "")
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - start)
            self.metrics.requests.labels(method, route, str(status)).inc()
