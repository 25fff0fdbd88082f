"""Async testbench helpers for NoC ports: whole messages on flit streams.

Built on the stream helpers of :mod:`apiary.stream.testbench` (which also has the watchdog,
the cycle counter and :func:`~apiary.stream.testbench.simulate`).
"""

from ..stream.testbench import stream_get, stream_put
from .header import Message


__all__ = ["send_flits", "recv_flits", "send_message", "recv_message", "split_messages"]


async def send_flits(ctx, port, flits, **stall):
    """Send ``(data, last)`` pairs on a flit stream."""
    for data, last in flits:
        await stream_put(ctx, port, {"data": data, "last": last}, **stall)


async def recv_flits(ctx, port, **stall):
    """Receive flits up to and including the one with ``last`` set; a list of ``(data, last)``."""
    flits = []
    while True:
        p = await stream_get(ctx, port, **stall)
        flits.append((int(p.data), int(p.last)))
        if p.last:
            return flits


async def send_message(ctx, port, message, width, **stall):
    await send_flits(ctx, port, message.flits(width), **stall)


async def recv_message(ctx, port, width, **stall):
    return Message.from_flits(await recv_flits(ctx, port, **stall), width)


def split_messages(flits):
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
