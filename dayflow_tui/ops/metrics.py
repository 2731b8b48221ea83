"""A worker's Prometheus metrics: what this process did (counters, histograms) and the fleet (``gauges``).

``WorkerMetrics`` listens to what the agent tells (``agent.telemetry``: claims,
model calls, step commits, back-offs, 429/529 waits) and to the worker's own
events (runs finished, failed, lost, paused), and serves them with the
database-derived gauges on ``http://HOST:PORT/metrics`` from a thread of its
own (prometheus-client's server). Counters are per process: sum them across
workers in PromQL (``sum(rate(dayflow_model_calls_total[5m]))``).

prometheus-client is the ``metrics`` extra; it is imported only when metrics
are asked for, and its absence is one line (exit 64) before anything is opened.
"""

from __future__ import annotations

from typing import Any

from ..agent import telemetry
from ..config.errors import MetricsMissing
from ..config.settings import current
from .gauges import StoreGauges

# Seconds: a claim or a commit is milliseconds on a healthy database, seconds when it is in trouble.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CALL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Model and agent names are labels: kept short (they come from agents' code and the API's replies).
LABEL_WIDTH = 100


def require_client() -> None:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise MetricsMissing("Prometheus metrics need prometheus-client: pip install 'dayflow-tui[metrics]'") from None


def _label(value: Any) -> str:
    text = "" if value is None else str(value)
    return text[:LABEL_WIDTH]


class WorkerMetrics:
    """One worker process's metrics registry, fed by telemetry and served over HTTP."""

    def __init__(self, host: str, port: int):
        require_client()
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.host, self.port = host, port
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.claims = Counter("dayflow_claims", "Claims asked for, by result (claimed, empty)", ["result"], registry=r)
        self.claim_seconds = Histogram("dayflow_claim_duration_seconds", "How long a claim took (found or not)",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.calls = Counter("dayflow_model_calls", "Model calls made, by model, agent and outcome "
                             "(ok, rate_limited, failed, broken: a stream cut part-way)", ["model", "agent", "outcome"], registry=r)
        self.call_seconds = Histogram("dayflow_model_call_duration_seconds", "How long a model call took",
                                      buckets=CALL_BUCKETS, registry=r)
        self.tokens = Counter("dayflow_tokens", "Tokens of committed replies, by model, agent and kind (input is "
                              "the whole input: uncached + cache writes + cache reads)", ["model", "agent", "kind"],
                              registry=r)
        self.dollars = Counter("dayflow_cost_dollars", "Dollars of committed replies, by model and agent (calls "
                               "of a model without a price are not counted)", ["model", "agent"], registry=r)
        self.commit_seconds = Histogram("dayflow_step_commit_duration_seconds", "How long the commit of a paid "
                                        "reply took (retries included)", buckets=LATENCY_BUCKETS, registry=r)
        self.failed_attempts = Counter("dayflow_failed_attempts", "Attempts that ended without a new step, by "
                                       "result (backoff, gave_up)", ["result"], registry=r)
        self.backoff_seconds = Counter("dayflow_backoff_seconds", "Seconds of back-off set after failed attempts",
                                       registry=r)
        self.rate_limited = Counter("dayflow_rate_limit_waits", "Runs released to wait out a 429 or 529",
                                    ["status"], registry=r)
        self.rate_limit_seconds = Counter("dayflow_rate_limit_wait_seconds", "Seconds waited for 429 and 529",
                                          ["status"], registry=r)
        self.limit_waits = Counter("dayflow_limit_waits", "Calls that waited for a shared limit, by model and "
                                   "result (granted, gave_up: backed off past limit_wait_s)", ["model", "result"],
                                   registry=r)
        self.limit_wait_seconds = Counter("dayflow_limit_wait_seconds", "Seconds calls waited for a shared limit",
                                          ["model"], registry=r)
        self.runs = Counter("dayflow_worker_runs", "Drives this worker ended, by outcome (finished, failed, "
                            "lost, paused)", ["outcome"], registry=r)
        self.store_errors = Counter("dayflow_worker_store_errors", "Database errors a worker thread waited out",
                                    registry=r)
        self.server = None

    @classmethod
    def for_settings(cls) -> "WorkerMetrics":
        config = current()
        return cls(config.metrics_host, config.metrics_port)

    def serve(self) -> str:
        """Start listening (before the database is opened: a port in use is refused with nothing written);
        the URL to scrape, with the port actually bound."""
        from prometheus_client import start_http_server

        telemetry.listen(self.told)
        try:
            self.server, _thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            from ..config.errors import UsageError

            raise UsageError(f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}") from None
        port = self.server.server_address[1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}/metrics"

    def watch(self, store: Any) -> None:
        """Serve the database-derived gauges of ``store`` from now on."""
        self.registry.register(StoreGauges(store))

    def worker_event(self, event: Any) -> None:
        """A ``WorkerEvent``: a drive ended (or a thread waited out the database)."""
        if event.kind == "error":
            self.store_errors.inc()
        elif event.kind != "started":
            self.runs.labels(event.kind).inc()

    def told(self, name: str, fields: dict[str, Any]) -> None:
        """What the agent tells (``agent.telemetry``), as counters and histograms."""
        if name == "claim":
            self.claims.labels("claimed" if fields.get("run_id") else "empty").inc()
            self.claim_seconds.observe(fields.get("duration_s") or 0.0)
        elif name == "model.call":
            self.calls.labels(_label(fields.get("model")), _label(fields.get("agent")), fields.get("outcome")).inc()
            self.call_seconds.observe(fields.get("duration_s") or 0.0)
        elif name == "step.committed":
            model, agent = _label(fields.get("model")), _label(fields.get("agent"))
            for kind in ("input", "output", "cache_read", "cache_write"):
                self.tokens.labels(model, agent, kind).inc(fields.get(f"{kind}_tokens") or 0)
            if fields.get("dollars") is not None:
                self.dollars.labels(model, agent).inc(fields["dollars"])
            self.commit_seconds.observe(fields.get("duration_s") or 0.0)
        elif name == "run.backoff":
            self.failed_attempts.labels("gave_up" if fields.get("gave_up") else "backoff").inc()
            self.backoff_seconds.inc(fields.get("backoff_s") or 0.0)
        elif name in ("limit.waited", "limit.gave_up"):
            model = _label(fields.get("model"))
            self.limit_waits.labels(model, "granted" if name == "limit.waited" else "gave_up").inc()
            self.limit_wait_seconds.labels(model).inc(max(fields.get("wait_s") or 0.0, 0.0))
        elif name == "rate_limit.wait":
            status = str(fields.get("status"))
            self.rate_limited.labels(status).inc()
            self.rate_limit_seconds.labels(status).inc(max(fields.get("wait_s") or 0.0, 0.0))
