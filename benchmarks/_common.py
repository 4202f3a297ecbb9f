"""Shared helpers of the benchmark scripts: logging, the agent child process, statistics, the results file.

Not a library module: the scripts import it as ``_common`` (they run as ``python benchmarks/pN_….py``, so
``benchmarks/`` is on ``sys.path``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import itertools
import logging
import os
import platform
import re
import statistics
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import structlog
import websockets

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DOCS = REPO / "docs" / "benchmarks.md"
AGENT_SCRIPT = HERE / "_agent_proc.py"
PROXY_SCRIPT = HERE / "_proxy_proc.py"

#: Bounds on waiting for the agent child process (start, one command, stop).
AGENT_START_TIMEOUT = 30.0
AGENT_COMMAND_TIMEOUT = 30.0
AGENT_STOP_TIMEOUT = 10.0


def quiet_logging() -> None:
    """Drop every structlog event below WARNING (the library never configures logging; scripts may).

    Without this structlog's default config formats and prints every ``info`` event, and that cost would
    dominate the measurements.
    """
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        cache_logger_on_first_use=False,
    )
    logging.getLogger("websockets").setLevel(logging.WARNING)


def parser(description: str) -> argparse.ArgumentParser:
    """The common command line: ``--quick`` and where the results go."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small sizes, a few seconds (the CI smoke test)")
    p.add_argument(
        "--docs",
        type=Path,
        default=None,
        help=f"results file to update (default: {DOCS.relative_to(REPO)} in full mode, none with --quick)",
    )
    p.add_argument("--no-docs", action="store_true", help="do not write any results file")
    p.add_argument(
        "--otel",
        action="store_true",
        help="measure the otel extra instead: instrumentation on vs off vs not installed, in one run (P2, P3)",
    )
    return p


def docs_target(args: argparse.Namespace) -> Path | None:
    """Where this run's section goes (``None``: print only)."""
    if args.no_docs:
        return None
    if args.docs is not None:
        return Path(args.docs)
    return None if args.quick else DOCS


def command_line() -> str:
    """The exact command that produced this run, relative to the repository root."""
    script = Path(sys.argv[0]).resolve()
    with contextlib.suppress(ValueError):
        script = script.relative_to(REPO)
    return " ".join(["python", str(script), *sys.argv[1:]])


def machine_note() -> str:
    """One line describing the machine (the results are only comparable within one run)."""
    cores = os.cpu_count()
    return (
        f"{cores} cores ({platform.machine()}, {platform.system()} {platform.release()}), "
        f"Python {platform.python_version()}, websockets {websockets.__version__}; shared, noisy machine "
        f"(load average {os.getloadavg()[0]:.1f} when this section was written)"
    )


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank on sorted values."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs"


def ratio_line(label: str, value: float, target: str, met: bool) -> str:
    """The line the smoke test looks for: ``RATIO <label>: <x>x (target …: met|MISSED)``."""
    return f"RATIO {label}: {value:.2f}x (target {target}: {'met' if met else 'MISSED'})"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


_HEADER = """# Benchmarks

Produced by the scripts in `benchmarks/` (see `benchmarks/README.md`). Every number is compared with a
baseline measured **in the same run** on the same machine; absolute numbers from different runs or
machines are not comparable. Each script rewrites only its own section below.
"""


def write_section(path: Path | None, key: str, title: str, body: str) -> None:
    """Replace (or append) the ``key`` section of the results file with ``body``, stamped with the
    command, the date and the machine."""
    if path is None:
        return
    stamp = (
        f"Command: `{command_line()}`  \n"
        f"Date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}  \n"
        f"Machine: {machine_note()}"
    )
    section = f"<!-- {key}:start -->\n## {title}\n\n{stamp}\n\n{body.strip()}\n<!-- {key}:end -->"
    text = path.read_text(encoding="utf-8") if path.exists() else _HEADER
    found = list(_SECTION.finditer(text))
    blocks = {m.group(2): m.group(1) for m in found}
    # hand-written notes stay: those between two sections go with the section before them (earlier runs kept
    # under a regenerated section), those after the last section stay at the end
    notes = {m.group(2): text[m.end() : after.start()].strip("\n") for m, after in itertools.pairwise(found)}
    head = (text[: found[0].start()] if found else text).rstrip("\n")
    tail = text[found[-1].end() :].strip("\n") if found else ""
    blocks[key] = section
    text = head + "\n\n" + "\n\n".join(blocks[k] + (f"\n\n{notes[k]}" if notes.get(k) else "") for k in sorted(blocks))
    text += "\n"
    if tail:
        text += "\n" + tail + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"results written to {path}")


_SECTION = re.compile(r"(<!-- (p\d+[a-z]*(?:-[a-z]+)?):start -->.*?<!-- \2:end -->)", re.S)


class ChildProcess:
    """A helper script in a child process, started and stopped by ``async with``: it prints its URL as its
    first line on stdout and stops at the end of its stdin. Subclasses give the command line."""

    #: what the script's first line must start with
    url_prefix = "ws://127.0.0.1:"

    def __init__(self) -> None:
        self.url = ""
        self._proc: asyncio.subprocess.Process | None = None

    def argv(self) -> list[str]:
        """The command line (after the interpreter)."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, *self.argv(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=str(REPO)
        )
        try:
            self.url = (await self._line(AGENT_START_TIMEOUT)).strip()
            if not self.url.startswith(self.url_prefix):
                raise RuntimeError(f"{type(self).__name__} printed {self.url!r} instead of its URL")
        except BaseException:
            await self._stop()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stop()

    async def _line(self, timeout: float) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        async with asyncio.timeout(timeout):
            line = await self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {type(self).__name__} ended")
        return line.decode()

    async def _send(self, text: str) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(text.encode() + b"\n")
        await self._proc.stdin.drain()

    async def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()  # end of input: the script stops serving and exits
        try:
            async with asyncio.timeout(AGENT_STOP_TIMEOUT):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
        if proc.stdout is not None:
            await proc.stdout.read()
        if proc.stdin is not None:
            with contextlib.suppress(ConnectionError):
                await proc.stdin.wait_closed()


class AgentProcess(ChildProcess):
    """The reference agent in a child process (``_agent_proc.py``), started and stopped by ``async with``.

    A separate process keeps the agent's CPU time out of the client's event loop (the machine has 2 cores);
    the agent is still part of every measurement, for ours and for every baseline alike.
    """

    def __init__(self, protocol: int = 2, *, also_v1: bool = False, flags: Sequence[str] = ()) -> None:
        super().__init__()
        self.protocol = protocol
        self.also_v1 = also_v1
        self.flags = tuple(flags)  # more options of _agent_proc.py (``--resumable``, ``--refuse``)

    def argv(self) -> list[str]:
        also = ["--also-v1"] if self.also_v1 else []
        return [str(AGENT_SCRIPT), "--protocol", str(self.protocol), *also, *self.flags]

    async def command(self, text: str) -> str:
        """Send one control command; return the text after ``ok``."""
        await self._send(text)
        answer = (await self._line(AGENT_COMMAND_TIMEOUT)).strip()
        if not answer.startswith("ok"):
            raise RuntimeError(f"agent command {text!r} answered {answer!r}")
        return answer[2:].strip()


class DelayProxyProcess(ChildProcess):
    """A ``FaultProxy`` delaying every chunk ``delay`` seconds each way, in a child process
    (``_proxy_proc.py``), in front of ``127.0.0.1:upstream_port``; :attr:`url` is its ``ws://`` address.

    A proxy on the client's own event loop would charge the link's work to the client: every chunk it
    forwards would wait while the client computes. A network does not take the client's CPU.
    """

    def __init__(self, upstream_port: int, delay: float) -> None:
        super().__init__()
        self.upstream_port = upstream_port
        self.delay = delay

    def argv(self) -> list[str]:
        return [str(PROXY_SCRIPT), str(self.upstream_port), str(self.delay)]

    async def set_delay(self, delay: float) -> None:
        """Change the delay of the live links and of new ones (``0``: pass-through): the path changed."""
        await self._send(f"delay {delay}")
        answer = (await self._line(AGENT_COMMAND_TIMEOUT)).strip()
        if answer != "ok":
            raise RuntimeError(f"the delay proxy answered {answer!r}")
        self.delay = delay


class OtelModes:
    """The modes of ``--otel`` runs: ``none`` (nothing installed, OpenTelemetry not imported yet on the first
    round), ``off`` (``acp_client.otel`` and the SDK imported, nothing instrumented) and ``on``
    (``acp_client.otel.instrument()`` with SDK providers: a batch span processor to an exporter that
    discards, and an in-memory metric reader). A client reads the instrumentation when it connects, so a
    client made inside :meth:`mode` ``"on"`` is instrumented; it stays installed for that block only.

    ``with_breakdown=True`` adds three modes that split ``on`` up (P3): ``sdk-span`` (no instrumentation;
    the benchmark itself starts and ends one bare SDK span, no attributes, around each call: what any
    per-request span costs, the floor), ``spans`` (``instrument()`` with the SDK tracer provider, a no-op
    meter provider and ``propagate=False``: our spans only) and ``metrics`` (a no-op tracer provider and the
    SDK meter provider: our metrics only; a no-op span has no context to propagate)."""

    BASE = ("none", "off", "on")
    BREAKDOWN = ("sdk-span", "spans", "metrics")
    #: ``sampled-1pct``: ``instrument()`` with an SDK tracer provider whose sampler is parent-based 1 %
    #: (``ParentBased(TraceIdRatioBased(0.01))``, the usual production setting), metrics on
    SAMPLED = ("sampled-1pct",)
    #: ``sdk-floor-1pct``: no instrumentation; the benchmark itself makes the two SDK calls any per-request
    #: instrumentation under that sampler makes: a span started and ended with the 1 % provider (dropped 99
    #: times in 100) and one duration recorded on an SDK histogram with the attributes ours carries. What
    #: the SDK alone costs there: ``sampled-1pct`` is priced against it as ``on`` is against ``sdk-span``
    FLOOR = ("sdk-floor-1pct",)

    def __init__(self, *, with_breakdown: bool = False) -> None:
        self._providers: tuple[Any, Any] | None = None
        self._sampled: Any = None
        self._exporter: Any = None
        self.spans = 0
        #: in the order each round runs them
        self.names: tuple[str, ...] = self.BASE + (self.BREAKDOWN + self.SAMPLED + self.FLOOR if with_breakdown else ())

    def _setup(self) -> tuple[Any, Any]:
        if self._providers is None:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import InMemoryMetricReader
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

            import acp_client.otel  # noqa: F401  (the "off" mode: imported, not instrumented)

            modes = self

            class Discard(SpanExporter):
                def export(self, spans: Any) -> SpanExportResult:
                    modes.spans += len(spans)
                    return SpanExportResult.SUCCESS

            self._exporter = Discard()
            tracer_provider = TracerProvider()
            tracer_provider.add_span_processor(BatchSpanProcessor(self._exporter))
            self._providers = (tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()]))
        return self._providers

    def _sampled_provider(self) -> Any:
        if self._sampled is None:
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

            self._setup()
            self._sampled = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.01)))
            # the same discarding exporter as the other modes (its spans are counted with theirs)
            self._sampled.add_span_processor(BatchSpanProcessor(self._exporter))
        return self._sampled

    def floor_instruments(self) -> tuple[Any, Any]:
        """The ``sdk-floor-1pct`` mode's tracer (the 1 % provider) and duration histogram (the shared SDK
        meter provider, an instrument of the benchmark's own)."""
        meter = self._setup()[1].get_meter("benchmark")
        histogram = meter.create_histogram("benchmark.call.duration", unit="s")
        return self._sampled_provider().get_tracer("benchmark"), histogram

    def bare_tracer(self) -> Any:
        """The tracer of the ``sdk-span`` mode (the SDK tracer provider every mode shares)."""
        return self._setup()[0].get_tracer("benchmark")

    @contextlib.contextmanager
    def mode(self, name: str) -> Iterator[None]:
        if name == "none":
            yield
            return
        tracer_provider, meter_provider = self._setup()
        if name in ("off", "sdk-span", "sdk-floor-1pct"):
            yield
            return
        import acp_client.otel

        if name == "spans":
            from opentelemetry.metrics import NoOpMeterProvider

            meter_provider = NoOpMeterProvider()
        elif name == "metrics":
            from opentelemetry.trace import NoOpTracerProvider

            tracer_provider = NoOpTracerProvider()
        elif name == "sampled-1pct":
            tracer_provider = self._sampled_provider()
        instrumentation = acp_client.otel.instrument(
            tracer_provider=tracer_provider, meter_provider=meter_provider, propagate=name != "spans"
        )
        try:
            yield
        finally:
            instrumentation.uninstrument()

    def shutdown(self) -> None:
        if self._sampled is not None:
            self._sampled.force_flush()
            self._sampled.shutdown()
        if self._providers is not None:
            tracer_provider, meter_provider = self._providers
            tracer_provider.force_flush()
            tracer_provider.shutdown()
            meter_provider.shutdown()


def rotated(names: Sequence[str], turn: int) -> list[str]:
    """``names`` starting at ``turn`` (mod their count): alternating modes, none of them always first."""
    k = turn % len(names)
    return [*names[k:], *names[:k]]


#: the otel extra's overhead target: at most 5 % slower when on, none when off
OTEL_TARGET = 1.05
#: issue 34's targets, priced against what is ours: a parent-based 1 % sampler <= 5 % of the p50; every span
#: sampled <= 5 % above one bare SDK span per call; instrumentation off <= 1 %
SAMPLED_TARGET = 1.05
ABOVE_SDK_SPAN_TARGET = 1.05
OFF_TARGET = 1.01


def priced_targets(key: str, slow: dict[str, float]) -> list[str]:
    """The three ``RATIO`` lines of issue 34 when the run has the modes they need (P3 ``--otel``)."""
    if "sampled-1pct" not in slow or "sdk-span" not in slow:
        return []
    above = slow["on"] / slow["sdk-span"]  # (on/none) / (sdk-span/none): on against one bare SDK span
    floor = [
        f"BREAKDOWN {key} otel sdk-floor-1pct/none p50 (the SDK's sampler decision + one histogram record, "
        f"made by the benchmark): {slow['sdk-floor-1pct']:.2f}x",
        f"BREAKDOWN {key} otel sampled-1pct/sdk-floor-1pct p50 (ours above the SDK's own calls): "
        f"{slow['sampled-1pct'] / slow['sdk-floor-1pct']:.2f}x",
    ] if "sdk-floor-1pct" in slow else []
    return [
        *floor,
        ratio_line(f"{key} otel sampled-1pct/none p50", slow["sampled-1pct"], f"<= {SAMPLED_TARGET}x",
                   slow["sampled-1pct"] <= SAMPLED_TARGET),
        ratio_line(f"{key} otel on/sdk-span p50 (ours above one bare SDK span)", above,
                   f"<= {ABOVE_SDK_SPAN_TARGET}x", above <= ABOVE_SDK_SPAN_TARGET),
        ratio_line(f"{key} otel off/none p50", slow["off"], f"<= {OFF_TARGET}x", slow["off"] <= OFF_TARGET),
    ]  # fmt: skip


def report_otel(
    args: argparse.Namespace,
    key: str,
    title: str,
    samples: dict[str, list[float]],
    modes: OtelModes,
    setup: str,
    *,
    lower_is_better: bool,
) -> int:
    """Print and write the ``--otel`` comparison: per mode the median (and p99 of latencies), and the
    slowdown of ``on`` and ``off`` against ``none`` (``> 1``: slower)."""
    if lower_is_better:
        stats = {name: (percentile(v, 0.5), percentile(v, 0.99)) for name, v in samples.items()}
        rows = [[name, str(len(samples[name])), us(p50), us(p99)] for name, (p50, p99) in stats.items()]
        header = ["otel extra", "round trips", "p50", "p99"]
        slow = {name: stats[name][0] / stats["none"][0] for name in samples if name != "none"}
        what = "p50 latency"
    else:
        meds = {name: median(v) for name, v in samples.items()}
        rows = [[name, str(len(samples[name])), f"{meds[name]:,.0f}/s"] for name in meds]
        header = ["otel extra", "runs", "median updates/s"]
        # paired: each run against the `none` run of the same rep, then the median of those ratios (a load
        # that drifts over the seconds a rep takes hits both runs of a pair alike)
        slow = {
            name: median([base / rate for base, rate in zip(samples["none"], v, strict=True)])
            for name, v in samples.items()
            if name != "none"
        }
        what = "throughput"
    lines = [
        ratio_line(
            f"{key} otel {name}/none {what} slowdown", slow[name], f"<= {OTEL_TARGET}x", slow[name] <= OTEL_TARGET
        )
        for name in ("off", "on")
    ]
    breakdown = [name for name in modes.BREAKDOWN if name in samples]
    lines += [f"BREAKDOWN {key} otel {name}/none {what} slowdown: {slow[name]:.2f}x" for name in breakdown]
    lines += priced_targets(key, slow)
    print(table(header, rows))
    for line in lines:
        print(line)
    print(f"spans exported: {modes.spans}")
    modes_text = (
        " Modes: `none` (no instrumentation; OpenTelemetry not yet imported when its client connected), `off` "
        "(`acp_client.otel` and the SDK imported, `instrument()` not called), `on` (`instrument()` with SDK "
        "providers: spans through a `BatchSpanProcessor` to an exporter that discards them, metrics to an "
        f"in-memory reader; {modes.spans} spans exported in all)."
    )
    if breakdown:
        modes_text += (
            " The breakdown modes split `on` up: `sdk-span` (no instrumentation; the benchmark starts and ends "
            "one bare SDK span, no attributes, around each call: the floor for any span per request), `spans` "
            "(our spans only: a no-op meter provider and `propagate=False`) and `metrics` (our metrics only: a "
            "no-op tracer provider)."
        )
    if "sdk-floor-1pct" in samples:
        modes_text += (
            " `sampled-1pct` is `on` with a parent-based 1 % sampler; `sdk-floor-1pct` has no instrumentation: "
            "the benchmark itself makes the two SDK calls any per-request instrumentation makes under that "
            "sampler (a span started and ended, dropped 99 times in 100, and one duration recorded on an SDK "
            "histogram with the four attributes ours carries), inline: what the SDK alone costs there."
        )
    body = "\n\n".join(
        [
            setup + modes_text,
            table(header, rows),
            f"Slowdown against `none` (> 1 is slower; target ≤ {OTEL_TARGET}x on, 1.00x off"
            + ("" if lower_is_better else "; the median of each run's ratio to the `none` run of its rep")
            + "):\n\n"
            + "\n".join(f"- `{line}`" for line in lines),
        ]
    )
    write_section(docs_target(args), f"{key}-otel", title, body)
    return 0


async def measured_recovery(
    agent: AgentProcess,
    url: str,
    store: Any,
    n: int,
    concurrency: int | str,
    clock: Callable[[], float],
    *,
    before_restart: Callable[[], Awaitable[None]] | None = None,
    when_ready: Callable[[], None] | None = None,
    timeout: float = 300.0,
    compression: str | None = "auto",
) -> float:
    """One timed recovery round of a ``ReconnectingClient`` (P1 and P13 share it).

    The client (v2, ``recovery_start_jitter=0``, ``Backoff(base=0.001)``, ``concurrency``) starts on ``url``
    with ``store`` holding ``n`` sessions and recovers them all once, untimed. Then ``before_restart`` runs
    (a path change, a GC pass, a profiler switched on), the agent restarts, and ``clock`` is read from
    just before the restart command until the ``READY`` event (then ``when_ready`` runs); every session
    must be attached again. ``compression`` is the client's ``TransportOptions.compression``.
    """
    from acp_client import Backoff, ClientState, Limits, ReconnectingClient, RecoveryPolicy, SessionLink, StateChanged
    from acp_client.transports import TransportOptions

    client = ReconnectingClient(
        url,
        store=store,
        protocol_version=2,
        policy=RecoveryPolicy(start_jitter=0.0, concurrency=concurrency),  # type: ignore[arg-type]
        limits=Limits(event_buffer=4 * n + 64),
        backoff=Backoff(base=0.001),
        transport_options=TransportOptions(compression=compression),  # type: ignore[arg-type]
    )

    def attached() -> int:
        return sum(s.link is SessionLink.ATTACHED for s in client.sessions.values())

    try:
        await client.start()
        await client.wait_ready(timeout=timeout)  # the first connection recovers them too: not timed
        if attached() != n:
            raise RuntimeError(f"only {attached()}/{n} sessions attached after the first connect")
        events = client.events()
        ready = asyncio.Event()

        async def watch() -> None:
            async for event in events:
                if isinstance(event, StateChanged) and event.new is ClientState.READY:
                    ready.set()
                    return

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0)  # let the watcher subscribe before the restart
        gc.collect()  # the timed part starts from a clean heap, as every method's does (P1 collects before each)
        if before_restart is not None:
            await before_restart()  # after the collection: a profiler or a counter switched on here misses it
        t0 = clock()
        await agent.command("restart")
        async with asyncio.timeout(timeout):
            await ready.wait()
        elapsed = clock() - t0
        if when_ready is not None:
            when_ready()  # (callgrind_round.py stops counting here)
        await watcher
        if attached() != n or client.generation < 2:
            raise RuntimeError(f"only {attached()}/{n} sessions attached (generation {client.generation})")
        return elapsed
    finally:
        await client.aclose()
