"""Endless flit sources and sinks for background testbenches that are still mid-message when
the simulation ends.

They wait with ``await ctx.tick().sample(...)`` (values at the clock edge, so the order in which
testbenches run does not matter), never inside ``ctx.tick().until()`` or ``async for``: a
background testbench left suspended inside such an asynchronous generator is closed at garbage
collection with "aclose(): asynchronous generator is already running", which on CPython 3.11
leaves the interpreter's recursion count off and breaks a later ``ast.parse``
(tests/test_architecture.py) in the same process."""

from apiary.noc import Message


async def put_message(ctx, port, message: Message, width: int) -> None:
    """Send ``message`` on the flit stream ``port``, one flit per cycle while ``ready``."""
    for data, last in message.flits(width):
        ctx.set(port.payload, {"data": data, "last": last})
        ctx.set(port.valid, 1)
        while True:
            _, _, ready = await ctx.tick().sample(port.ready)
            if ready:
                break
    ctx.set(port.valid, 0)


async def collect_messages(ctx, port, width: int, out: list, ready=lambda cycle: True,
                           times: list | None = None) -> None:
    """Take messages from ``port`` forever (``ready(cycle)`` says in which cycles), appending
    each to ``out`` as a :class:`Message` (and to ``times`` the cycle of its last flit)."""
    flits, cycle = [], 0
    while True:
        ctx.set(port.ready, bool(ready(cycle)))
        _, _, valid, taken, data, last = await ctx.tick().sample(
            port.valid, port.ready, port.payload.data, port.payload.last)
        if valid and taken:
            flits.append((int(data), int(last)))
            if last:
                out.append(Message.from_flits(flits, width))
                if times is not None:
                    times.append(cycle)
                flits = []
        cycle += 1
