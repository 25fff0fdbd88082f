"""Async testbench helpers for streams (Amaranth 0.5 ``sim.add_testbench``).

Used by the project's tests and by anyone testing a component: put and get single transfers,
send and receive whole packets on payload streams, with optional seeded random stalls on either
side; a watchdog, a cycle counter, and :func:`simulate` to run it all. The NoC's own helpers
(whole messages on flit streams) are in :mod:`apiary.noc.testbench`.

A simulation ends with testbenches still waiting: background ones, and any that were waiting
when a testbench raised or the driver stopped advancing. :func:`simulate` ends them before it
returns (:func:`end_testbenches`, which a test that builds its own ``Simulator`` calls too), so
none is left for the garbage collector to close at some later test.
"""

import inspect
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from amaranth import Elaboratable, Module, Signal
from amaranth.sim import SimulatorContext


__all__ = ["stream_put", "stream_get", "take_either", "packet_words", "send_packet", "recv_packet",
           "mac_frame_words", "send_mac_frame", "recv_mac_frame", "transfers", "watchdog",
           "simulate", "end_testbenches", "WithCycleCounter"]


async def _stall(ctx: SimulatorContext, rng: random.Random | None, stall: float) -> None:
    if rng is not None:
        while rng.random() < stall:
            await ctx.tick()


async def stream_put(ctx: SimulatorContext, stream: Any, payload: Any, *,
                     rng: random.Random | None = None, stall: float = 0.0) -> None:
    """Offer ``payload`` on ``stream`` until it is taken; with ``rng``, idle first with
    probability ``stall`` per cycle. Returns after the transfer's clock edge."""
    await _stall(ctx, rng, stall)
    ctx.set(stream.payload, payload)
    ctx.set(stream.valid, 1)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx: SimulatorContext, stream: Any, *, rng: random.Random | None = None,
                     stall: float = 0.0) -> Any:
    """Take one transfer from ``stream`` and return its payload (a ``data.Const`` for layouts)."""
    await _stall(ctx, rng, stall)
    ctx.set(stream.ready, 1)
    payload, = await ctx.tick().sample(stream.payload).until(stream.valid)
    ctx.set(stream.ready, 0)
    return payload


async def take_either(ctx: SimulatorContext, first: Any, second: Any, rng: random.Random,
                      stall: float) -> tuple[Any, Any]:
    """One cycle of a consumer of two streams that raises each ``ready`` at random and apart
    (so that it also takes both in the same cycle): the payloads taken on ``first`` and
    ``second`` in this cycle, ``None`` for a stream that moved nothing."""
    ready = (rng.random() >= stall, rng.random() >= stall)
    taken = []
    for port, on in zip((first, second), ready):
        ctx.set(port.ready, on)
    for port, on in zip((first, second), ready):
        taken.append(ctx.get(port.payload) if on and ctx.get(port.valid) else None)
    await ctx.tick()
    return taken[0], taken[1]


def packet_words(packet: bytes, width: int,
                 rng: random.Random | None = None) -> list[dict[str, int]]:
    """Payload-stream words (dicts of ``data``, ``nbytes``, ``last``) of the bytes ``packet``.

    An empty packet is one word with ``nbytes == 0``. With ``rng``, lanes past ``nbytes`` hold
    random bytes (a receiver must ignore them), otherwise zeros.
    """
    nb = width // 8
    if not packet:
        return [{"data": rng.getrandbits(width) if rng else 0, "nbytes": 0, "last": 1}]
    words = []
    for off in range(0, len(packet), nb):
        chunk = bytes(packet[off:off + nb])
        garbage = (rng.getrandbits(8 * (nb - len(chunk))) << (8 * len(chunk))) if rng else 0
        words.append({"data": int.from_bytes(chunk, "little") | garbage, "nbytes": len(chunk),
                      "last": int(off + nb >= len(packet))})
    return words


async def send_packet(ctx: SimulatorContext, port: Any, packet: bytes, width: int, *,
                      rng: random.Random | None = None, stall: float = 0.0) -> None:
    """Send the bytes ``packet`` on a payload stream (random idle cycles with ``rng``)."""
    for word in packet_words(packet, width, rng):
        await stream_put(ctx, port, word, rng=rng, stall=stall)


async def recv_packet(ctx: SimulatorContext, port: Any, width: int, **stall: Any) -> bytes:
    """Receive one packet from a payload stream as bytes, asserting the framing rules on every
    word: lanes past ``nbytes`` are zero, every word but the last is full, and an empty word
    only ever forms an empty packet."""
    nb = width // 8
    out = b""
    while True:
        p = await stream_get(ctx, port, **stall)
        n, value = int(p.nbytes), int(p.data)
        assert n <= nb, f"nbytes {n} is above the width"
        assert value >> (8 * n) == 0, "lanes past nbytes are not zero"
        assert p.last or n == nb, "a word before the last is not full"
        assert n > 0 or out == b"", "an empty word ends a non-empty packet"
        out += value.to_bytes(nb, "little")[:n]
        if p.last:
            return out


def mac_frame_words(frame: bytes, width: int, byte_enables: str = "keep", *, error: bool = False,
                    error_word: int | None = None) -> list[dict[str, int]]:
    """The words of ``frame`` on a MAC port's stream (:func:`~apiary.stream.mac.mac_word_layout`):
    dicts of ``data``, the byte enables (``keep`` or ``last_be``), ``last`` and ``error``. With
    ``error``, word ``error_word`` (default: the last) has ``error`` set, as a MAC marks a frame
    whose FCS was wrong."""
    nb = width // 8
    chunks = [frame[i:i + nb] for i in range(0, len(frame), nb)] or [b""]
    words = []
    for k, chunk in enumerate(chunks):
        last = k == len(chunks) - 1
        if byte_enables == "keep":
            enables = (1 << len(chunk)) - 1
        else:
            enables = (1 << (len(chunk) - 1)) if last and chunk else 0
        bad = error and k == (len(chunks) - 1 if error_word is None else error_word)
        words.append({"data": int.from_bytes(chunk, "little"), byte_enables: enables,
                      "last": int(last), "error": int(bad)})
    return words


async def send_mac_frame(ctx: SimulatorContext, stream: Any, frame: bytes, width: int,
                         byte_enables: str = "keep", *, rng: random.Random | None = None,
                         stall: float = 0.0, **error: Any) -> None:
    """Send ``frame`` on a MAC port's ``rx`` stream (see :func:`mac_frame_words`)."""
    for word in mac_frame_words(frame, width, byte_enables, **error):
        await stream_put(ctx, stream, word, rng=rng, stall=stall)


async def recv_mac_frame(ctx: SimulatorContext, stream: Any, width: int,
                         byte_enables: str = "keep", **stall: Any) -> bytes:
    """Receive one frame from a MAC port's ``tx`` stream as bytes, asserting the byte-enable
    convention on every word (``keep`` contiguous from byte 0 and full before the last word;
    ``last_be`` one-hot on, and only on, the last word) and that ``error`` is 0."""
    nb = width // 8
    out = b""
    while True:
        w = await stream_get(ctx, stream, **stall)
        enables, last = int(getattr(w, byte_enables)), int(w.last)
        assert int(w.error) == 0, "a frame to the MAC with error set"
        if byte_enables == "keep":
            n = enables.bit_length()
            assert enables == (1 << n) - 1, "keep is not contiguous from byte 0"
            assert last or n == nb, "a word before the last is not full"
        else:
            assert (enables == 0) != bool(last), "last_be not set on, and only on, the last word"
            assert enables & (enables - 1) == 0, "last_be is not one-hot"
            n = enables.bit_length() if last else nb
        out += int(w.data).to_bytes(nb, "little")[:n]
        if last:
            return out


def transfers(port: Any, log: list[int]) -> Callable[[SimulatorContext], Awaitable[None]]:
    """A background testbench that appends to ``log`` the cycle number (from 0, the first
    cycle of the simulation) of every transfer on the stream ``port``."""
    async def tb(ctx: SimulatorContext) -> None:
        cycle = 0
        async for _, _, valid, ready in ctx.tick().sample(port.valid, port.ready):
            if valid and ready:
                log.append(cycle)
            cycle += 1
    return tb


def watchdog(cycles: int) -> Callable[[SimulatorContext], Awaitable[None]]:
    """A background testbench that fails the test if the simulation still runs after ``cycles``
    cycles, so that a wedged design fails instead of hanging::

        sim.add_testbench(watchdog(10_000), background=True)
    """
    async def tb(ctx: SimulatorContext) -> None:
        for _ in range(cycles):
            await ctx.tick()
        raise AssertionError(f"the simulation still runs after {cycles} cycles")
    return tb


def simulate(dut: Elaboratable, *testbenches: Callable[[SimulatorContext], Awaitable[Any]],
             background: Iterable[Callable[[SimulatorContext], Awaitable[Any]]] = (),
             timeout: int | None = None, period: float = 1e-8) -> None:
    """Run ``dut`` on a ``sync`` clock until every testbench in ``testbenches`` has returned.

    ``background`` testbenches run alongside and end with the simulation; with ``timeout``
    (cycles) a :func:`watchdog` fails the run if it goes on longer.
    """
    from amaranth.sim import Simulator
    sim = Simulator(dut)
    sim.add_clock(period)
    for tb in background:
        sim.add_testbench(tb, background=True)
    if timeout is not None:
        sim.add_testbench(watchdog(timeout), background=True)
    for tb in testbenches:
        sim.add_testbench(tb)
    try:
        sim.run()
    finally:
        end_testbenches(sim)


class _SimulationEnded(BaseException):
    """Thrown into a testbench that still waits when its simulation ends (a ``BaseException``,
    as ``GeneratorExit`` is, so that ``except Exception`` in a testbench does not catch it)."""


def end_testbenches(sim: Any) -> None:
    """End, now, every testbench and process of the Amaranth ``Simulator`` ``sim`` that has not
    returned; call it when the simulation is over (it cannot go on after).

    Left suspended, they are closed whenever the garbage collector gets to them, at some later
    test: on CPython 3.11 one waiting in ``await ctx.tick().until(...)`` or ``.repeat(...)`` (as
    :func:`stream_put` and :func:`stream_get` do) then fails with "RuntimeError: aclose():
    asynchronous generator is already running" (an exception Python can only print), and one
    that never ran warns that it "was never awaited". Here each one still waiting gets an
    exception thrown in where it waits, and unwinds as from any exception (its ``finally``
    blocks run, ``until`` closes its trigger); one that never started is closed.
    """
    engine = getattr(sim, "_engine", None)     # Amaranth 0.5's PySimEngine holds the coroutines
    runnables = [*getattr(engine, "_testbenches", ()), *getattr(engine, "_processes", ())]
    for runnable in runnables:
        coroutine = getattr(runnable, "coroutine", None)
        if not inspect.iscoroutine(coroutine):
            continue                            # a clock, the design's logic, or one finished
        if inspect.getcoroutinestate(coroutine) == inspect.CORO_SUSPENDED:
            try:
                coroutine.throw(_SimulationEnded())
            except (_SimulationEnded, StopIteration):
                continue
        if inspect.getcoroutinestate(coroutine) != inspect.CORO_RUNNING:
            coroutine.close()                   # never started, or waits again in a finally


class WithCycleCounter(Elaboratable):
    """``dut`` plus a free-running cycle counter ``cycle``, so that every testbench of a
    simulation reads the same cycle number with ``ctx.get(wrapper.cycle)``."""

    def __init__(self, dut: Elaboratable, width: int = 32) -> None:
        self.dut = dut
        self.cycle = Signal(width)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.submodules.dut = self.dut
        m.d.sync += self.cycle.eq(self.cycle + 1)
        return m
