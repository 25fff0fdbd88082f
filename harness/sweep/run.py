"""Running a sweep on Dask distributed: an embedded ``LocalCluster``, or an existing scheduler.

Each task's result is cached on disk (:class:`ResultCache`) under its key (the design's
fingerprint, the job, its parameters and its benchmark's source), so a re-run only runs what
changed. A job that raises or times out is a failed :class:`Outcome` with its error, and the
others go on; a job whose worker is lost runs again on another (Dask's
``allowed-failures``), and one that could not start on a worker is retried (``retries``).
Ctrl-C cancels what is still queued or running and re-raises ``KeyboardInterrupt`` (what
finished stays cached).
"""

import datetime
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from .jobs import Columns
from .spec import Sweep, Task, describe


__all__ = ["Outcome", "ResultCache", "run_task", "run_sweep", "default_cache_dir"]


def today(at: float | None = None) -> str:
    """The date (UTC) of the time ``at`` (seconds since the epoch; default now), as a
    measurement is dated."""
    moment = datetime.datetime.now(datetime.timezone.utc) if at is None else \
        datetime.datetime.fromtimestamp(at, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d")


@dataclass
class Outcome:
    """What became of one task: its columns, or its error; ``cached`` if not run this time;
    ``measured``, the day (UTC, ``YYYY-MM-DD``) its columns were measured."""
    task: Task
    columns: Columns = field(default_factory=dict)
    error: str | None = None
    cached: bool = False
    seconds: float = 0.0
    measured: str = field(default_factory=today)

    @property
    def ok(self) -> bool:
        return self.error is None


def default_cache_dir() -> str:
    """``$APIARY_SWEEP_CACHE`` if set, else ``$APIARY_CACHE/sweep`` (default
    ``~/.cache/apiary/sweep``), beside the Verilator cache."""
    if os.environ.get("APIARY_SWEEP_CACHE"):
        return os.environ["APIARY_SWEEP_CACHE"]
    root = os.environ.get("APIARY_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "apiary")
    return os.path.join(root, "sweep")


class ResultCache:
    """Successful job results, one JSON file per key under ``path``, and a record
    (``executed.jsonl``, one line per job run) of what was executed, with its key."""

    def __init__(self, path: str):
        self.path = path

    def get(self, key: str | None) -> Columns | None:
        """The columns stored under ``key``, or ``None``."""
        found = self.get_dated(key)
        return None if found is None else found[0]

    def get_dated(self, key: str | None) -> tuple[Columns, str] | None:
        """The columns stored under ``key`` and the day they were measured (for an entry
        stored before entries were dated, the day its file was written), or ``None``."""
        if key is None:
            return None
        path = os.path.join(self.path, key + ".json")
        try:
            with open(path) as f:
                entry = json.load(f)
            return entry["columns"], entry.get("measured") or today(os.path.getmtime(path))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def record(self, outcome: Outcome) -> None:
        """Note that ``outcome``'s task ran; store its columns if it succeeded."""
        os.makedirs(self.path, exist_ok=True)
        task = outcome.task
        entry = {"key": task.key, "design": task.design, "point": task.point,
                 "job": task.job.kind, "params": task.job.params(), "error": outcome.error,
                 "seconds": round(outcome.seconds, 3), "measured": outcome.measured}
        with open(os.path.join(self.path, "executed.jsonl"), "a") as f:
            f.write(json.dumps(entry, default=repr) + "\n")
        if outcome.ok and task.key is not None:
            tmp = os.path.join(self.path, f"{task.key}.{os.getpid()}.tmp")
            with open(tmp, "w") as f:
                json.dump({**entry, "columns": outcome.columns}, f, default=repr)
            os.replace(tmp, os.path.join(self.path, task.key + ".json"))

    def executed(self) -> list[dict[str, Any]]:
        """Every job run so far with this cache, oldest first."""
        try:
            with open(os.path.join(self.path, "executed.jsonl")) as f:
                return [json.loads(line) for line in f if line.strip()]
        except OSError:
            return []


def _error_text(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _run_job(task: Task) -> Columns:
    from apiary.load import load_design
    if task.design is None:              # (Sweep.tasks gives no design only to jobs needing none)
        return task.job.run(None, None, task.point)  # type: ignore[arg-type]
    return task.job.run(load_design(task.design, **task.point), task.design, task.point)


def _outcome(task: Task, columns: Columns | None, error: str | None, seconds: float) -> Outcome:
    if error is None and columns is not None and not task.job.succeeded(columns):
        error = f"exit status {columns.get('status')}"
    return Outcome(task, columns or {}, error, seconds=seconds)


def run_task(task: Task, timeout: float | None = None) -> tuple[Columns | None, str | None, float]:
    """Run ``task`` (on a worker): ``(columns, None, seconds)``, or ``(None, error, seconds)``
    if it raised or ran over ``timeout`` seconds. Never raises for the job's own failures, so
    Dask retries only lost workers. A job over time is abandoned in its thread, not killed."""
    result: list[Any] = []
    start = time.monotonic()

    def body() -> None:
        try:
            result.append((_run_job(task), None))
        except BaseException as e:           # noqa: BLE001 -- reported as the job's error
            result.append((None, _error_text(e)))

    thread = threading.Thread(target=body, daemon=True, name=f"sweep-task-{task.index}")
    thread.start()
    thread.join(timeout)
    seconds = time.monotonic() - start
    if not result:
        return None, f"timed out after {timeout:g} s", seconds
    columns, error = result[0]
    return columns, error, seconds


class Progress:
    """Reports tasks as they finish. On a terminal, one line redrawn every second: a bar, done /
    running or queued / failed / cached of the total, the time so far and an ETA (the jobs left
    at the pace of those run so far); elsewhere, one line per finished task, with the ETA."""

    def __init__(self, total: int, stream: TextIO | None = None, live: bool | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.live = self.stream.isatty() if live is None else live
        self.total = total
        self.done = self.failed = self.cached = 0
        self.running = 0
        self.start = time.monotonic()
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    def eta(self) -> float | None:
        """Seconds left, at the pace of the jobs run so far (``None`` before the first)."""
        ran = self.done - self.cached
        if ran <= 0:
            return None
        return (time.monotonic() - self.start) / ran * (self.total - self.done)

    def line(self) -> str:
        """The live line: bar, counts, time so far, ETA."""
        width = 20
        filled = width * self.done // max(1, self.total)
        eta = self.eta()
        return (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} done, "
                f"{self.running} running or queued, {self.failed} failed, {self.cached} cached; "
                f"{_duration(time.monotonic() - self.start)}"
                + (f", ETA {_duration(eta)}" if eta is not None and self.done < self.total
                   else ""))

    def submitted(self, running: int) -> None:
        """``running`` tasks were sent to the cluster: start redrawing the live line."""
        self.running = running
        if self.live and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, daemon=True,
                                            name="sweep-progress")
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._draw()

    def _draw(self, end: str = "") -> None:
        with self._lock:
            self.stream.write(f"\r\x1b[K{self.line()}{end}")
            self.stream.flush()

    def close(self) -> None:
        """Stop redrawing (the last line stays)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None

    def finished(self, outcome: Outcome, running: int) -> None:
        self.done += 1
        self.failed += not outcome.ok
        self.cached += outcome.cached
        self.running = running
        if self.live:
            self._draw("\n" if self.done == self.total else "")
            if self.done == self.total:
                self.close()
            return
        task = outcome.task
        how = ("cached" if outcome.cached else
               f"{'ok' if outcome.ok else 'FAILED'} in {outcome.seconds:.1f} s")
        error = f": {outcome.error}" if outcome.error else ""
        what = task.job.label() or f"{task.job.kind} at {describe(task.point)}"
        eta = self.eta()
        left = (f" (ETA {_duration(eta)})" if eta is not None and not outcome.cached
                and self.done < self.total else "")
        with self._lock:
            self.stream.write(f"[{self.done}/{self.total}] {what}: {how}{error}{left}\n")
            self.stream.flush()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def _client(scheduler: str | None, workers: int | None) -> tuple[Any, Callable[[], None]]:
    """A Dask client of ``scheduler``, or of a new LocalCluster of ``workers`` processes (one
    thread each); and what closes them."""
    from distributed import Client, LocalCluster
    if scheduler:
        client = Client(scheduler)
        return client, client.close
    cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                           processes=True, dashboard_address=":0")
    client = Client(cluster)

    def close() -> None:
        client.close()
        cluster.close()
    return client, close


def run_sweep(sweep: Sweep, *, scheduler: str | None = None, workers: int | None = None,
              cache_dir: str | None = None, retries: int = 2,
              progress: Progress | None = None,
              stream: TextIO | None = None, fresh: bool = False) -> list[Outcome]:
    """Check ``sweep``, then run every task not in the cache on Dask (``scheduler``, an address
    such as ``tcp://host:8786``, or an embedded LocalCluster of ``workers``); returns one
    :class:`Outcome` per task, in the sweep's order. Raises :class:`ValueError` for a bad sweep
    before any cluster starts.

    ``workers=0`` runs the tasks in this process, one after another, without Dask: a job's
    exception then propagates (as under a debugger) and there is no time-out. ``fresh`` runs
    every task, cached or not (the new results replace the old)."""
    tasks = sweep.tasks()
    cache = ResultCache(cache_dir or default_cache_dir())
    outcomes: dict[int, Outcome] = {}
    progress = progress or Progress(len(tasks), stream)
    todo = []
    for task in tasks:
        found = None if fresh else cache.get_dated(task.key)
        if found is None:
            todo.append(task)
        else:
            outcomes[task.index] = Outcome(task, found[0], cached=True, measured=found[1])
            progress.finished(outcomes[task.index], 0)

    def ran(outcome: Outcome, pending: int) -> None:
        cache.record(outcome)
        outcomes[outcome.task.index] = outcome
        progress.finished(outcome, pending)

    if todo and workers == 0 and not scheduler:
        for n, task in enumerate(todo):
            start = time.monotonic()
            ran(_outcome(task, _run_job(task), None, time.monotonic() - start), len(todo) - n - 1)
    elif todo:
        _execute(todo, sweep.timeout, scheduler, workers, retries, ran, progress)
    return [outcomes[t.index] for t in tasks]


def _execute(todo: list[Task], timeout: float | None, scheduler: str | None,
             workers: int | None, retries: int, ran: Callable[[Outcome, int], None],
             progress: Progress) -> None:
    from distributed import as_completed
    client, close = _client(scheduler, workers)
    futures = {}
    try:
        for task in todo:
            future = client.submit(run_task, task, timeout, retries=retries, pure=False,
                                   key=f"sweep-{task.job.kind}-{task.index}-{task.key or 'x'}")
            futures[future.key] = (future, task)
        pending = len(futures)
        progress.submitted(pending)
        for future in as_completed([f for f, _ in futures.values()]):
            task = futures[future.key][1]
            pending -= 1
            try:
                columns, error, seconds = future.result()
            except Exception as e:          # noqa: BLE001 -- the worker died (after retries)
                columns, error, seconds = None, f"lost: {_error_text(e)}", 0.0
            ran(_outcome(task, columns, error, seconds), pending)
    except KeyboardInterrupt:
        client.cancel([f for f, _ in futures.values()], force=True)
        raise
    finally:
        progress.close()
        close()
