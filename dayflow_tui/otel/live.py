"""Live export: a run's spans leave for the receiver as its steps commit, while a front end drives it.

The agent does not know this module: ``agent.events`` keeps a list of
``DriveWatch`` hooks that every drive calls (``check`` before a run is
claimed, ``start`` when it is driven), and ``watch_drives()`` puts
``LIVE_EXPORT`` on it. The CLI's driving commands (``cli/driving.py``) and
the dashboard (``tui/app.py``) call it; a program that drives runs itself
calls ``dayflow_tui.otel.live.watch_drives()`` once to send its traces too.
With no ``otel_endpoint`` setting the hook does nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..agent.events import DriveWatch, StepEvent, watch
from ..config import settings
from ..store import Store, safe_url
from ..store.tables.resumes import run_resumes
from .export import Emitter, Problems, cut, require_sdk, traces_url
from .plan import TraceSource, plan_agent, plan_chat, plan_tools, read_source

if TYPE_CHECKING:
    from ..store.models import Step

# A step's spans leave within this long; at a drive's end, wait at most this for the rest.
LIVE_BATCH_DELAY_MS = 500
LIVE_FLUSH_TIMEOUT_S = 5.0


def live_export_wanted() -> bool:
    return bool(settings.current().otel_endpoint)


def require_live_export() -> None:
    """Refuse to start or resume a run when ``otel_endpoint`` is set but the SDK is missing (before any claim)."""
    if live_export_wanted():
        require_sdk("the otel_endpoint setting")


class LiveTrace:
    """Sends a driven run's spans as its steps commit: ``chat`` at the response, ``execute_tool`` at the results,
    ``invoke_agent`` when the drive ends (again at each resume: same ids, a later end, one more resume event).

    Telemetry never stops a run: a receiver that is down, a row that cannot be
    read, costs spans (``problem`` says why; ``dayflow export --otlp`` sends
    them again), never a step.
    """

    def __init__(self, store: Store, run_id: str, endpoint: str, *, content: bool):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.store = store
        self.run_id = run_id
        self.endpoint = endpoint
        self.content = content
        self.problem: str | None = None
        self._steps: dict[int, "Step"] = {}
        self._logs = Problems()
        logger = logging.getLogger("opentelemetry")
        logger.addHandler(self._logs)
        logger.propagate = False  # a dashboard's screen or a CLI's output is no place for the SDK's log
        self.processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint),
                                                             timeout=LIVE_FLUSH_TIMEOUT_S),
                                            schedule_delay_millis=LIVE_BATCH_DELAY_MS)
        self.emitter = Emitter(run_id, self.processor)

    def _source(self, n: int) -> TraceSource:
        """The run with its steps up to ``n``, reading only what changed since the last event."""
        if not self._steps and n > 1:
            self._steps = {s.n: s for s in self.store.steps(self.run_id)}
        else:
            self._steps.update({s.n: s for s in self.store.steps(self.run_id, from_n=n)})
        run = self.store.get_run(self.run_id)
        return TraceSource(run=run, steps=[self._steps[k] for k in sorted(self._steps)],
                           resumes=run_resumes(self.store, self.run_id), status=run.status)

    def on_step(self, event: StepEvent) -> None:
        try:
            source = self._source(event.n)
            step = source.step(event.n)
            if step is None:
                return
            if event.phase == "response":
                self.emitter.emit([plan_chat(source, step, content=self.content)])
            else:
                self.emitter.emit(plan_tools(source, step, content=self.content))
        except Exception as exc:  # telemetry must never cost a step
            self.problem = f"{type(exc).__name__}: {cut(str(exc))}"

    def finish(self) -> str | None:
        """Send the agent span as the run stands now, wait for the rest; a line saying what failed, or None."""
        try:
            source = read_source(self.store, self.run_id)
            self.emitter.emit([plan_agent(source, content=self.content)])
        except Exception as exc:
            self.problem = f"{type(exc).__name__}: {cut(str(exc))}"
        try:
            flushed = self.processor.force_flush(int(LIVE_FLUSH_TIMEOUT_S * 1000))
            self.emitter.shutdown()
        finally:
            logging.getLogger("opentelemetry").removeHandler(self._logs)
        if self._logs.lines and self.problem is None:
            self.problem = cut(self._logs.lines[-1])
        elif not flushed and self.problem is None:
            self.problem = f"timed out after {LIVE_FLUSH_TIMEOUT_S:.0f} s"
        if self.problem is None:
            return None
        return (f"traces of run {self.run_id} not fully sent to {safe_url(self.endpoint)}: {self.problem} "
                f"(send them again: dayflow export {self.run_id} --otlp URL)")


def live_trace(store: Store, run_id: str) -> LiveTrace | None:
    """A ``LiveTrace`` when the ``otel_endpoint`` setting names a receiver, else None."""
    chosen = settings.current()
    if not chosen.otel_endpoint:
        return None
    require_sdk("the otel_endpoint setting")
    return LiveTrace(store, run_id, chosen.otel_endpoint, content=chosen.otel_content)


LIVE_EXPORT = DriveWatch(name="otel live export", check=require_live_export, start=live_trace)


def watch_drives() -> None:
    """Send the spans of every run this process drives from now on (when the ``otel_endpoint`` setting is set)."""
    watch(LIVE_EXPORT)
