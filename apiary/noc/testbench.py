"""Async testbench helpers for NoC ports: whole messages on flit streams.

Built on the stream helpers of :mod:`apiary.stream.testbench` (which also has the watchdog,
the cycle counter and :func:`~apiary.stream.testbench.simulate`).
"""

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from amaranth.sim import SimulatorContext

from ..stream.testbench import stream_get, stream_put
from .header import Message
from .spec import message_flits, message_from_flits


__all__ = ["send_flits", "recv_flits", "send_message", "recv_message", "split_messages",
           "message_source", "expect_messages"]


async def send_flits(ctx: SimulatorContext, port: Any, flits: Iterable[tuple[int, int]],
                     **stall: Any) -> None:
    """Send ``(data, last)`` pairs on a flit stream."""
    for data, last in flits:
        await stream_put(ctx, port, {"data": data, "last": last}, **stall)


async def recv_flits(ctx: SimulatorContext, port: Any, **stall: Any) -> list[tuple[int, int]]:
    """Receive flits up to and including the one with ``last`` set; a list of ``(data, last)``."""
    flits = []
    while True:
        p = await stream_get(ctx, port, **stall)
        flits.append((int(p.data), int(p.last)))
        if p.last:
            return flits


async def send_message(ctx: SimulatorContext, port: Any, message: Message, width: int,
                       **stall: Any) -> None:
    """Send ``message`` framed as a tile's framing frames it (:func:`~.spec.message_flits`)."""
    await send_flits(ctx, port, message_flits(message, width), **stall)


async def recv_message(ctx: SimulatorContext, port: Any, width: int,
                       **stall: Any) -> Message:
    """Receive a message and take it apart (:func:`~.spec.message_from_flits`)."""
    return message_from_flits(await recv_flits(ctx, port, **stall), width)


def split_messages(flits: Iterable[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Cut a list of ``(data, last)`` flits into messages; a trailing partial message is an
    error."""
    messages, current = [], []
    for flit in flits:
        current.append(flit)
        if flit[1]:
            messages.append(current)
            current = []
    assert not current, "a message without its last flit"
    return messages


def message_source(port: Any, messages: Iterable[Message], width: int,
                   **stall: Any) -> Callable[[SimulatorContext], Awaitable[None]]:
    """A testbench that sends ``messages`` on ``port`` in order (``stall``: ``rng=``,
    ``stall=``, as :func:`send_message`)."""
    async def tb(ctx: SimulatorContext) -> None:
        for message in messages:
            await send_message(ctx, port, message, width, **stall)
    return tb


def expect_messages(port: Any, messages: Iterable[Message], width: int,
                    **stall: Any) -> Callable[[SimulatorContext], Awaitable[None]]:
    """A testbench that receives one message per item of ``messages`` from ``port`` and checks
    that it equals that item as framed at ``width``."""
    async def tb(ctx: SimulatorContext) -> None:
        for message in messages:
            got = await recv_message(ctx, port, width, **stall)
            assert got == message_from_flits(message_flits(message, width), width), \
                (got, message)
    return tb
