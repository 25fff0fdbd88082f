"""One protocol tile on its own, in Amaranth's simulator: what the per-protocol tests share.

A tile is built standalone (:func:`make_tile`) with a next-hop table and the design's addresses;
packets go in as NoC messages carrying :data:`~beehive.proto.messages.PACKET_META` (or as frames
on ``mac_rx``), with seeded random gaps; what comes out is collected with seeded random
back-pressure and decoded (:func:`decode`), and the tile's counters are read at the end.
"""

import random
from dataclasses import dataclass, field

from apiary.noc.framing import decode_meta_message, meta_message_flits
from apiary.noc.spec import head_bytes
from apiary.noc.header import NocHeader
from apiary.noc.nexthop import Endpoint
from apiary.noc.testbench import recv_flits, send_flits
from apiary.stream.testbench import (packet_words, recv_packet, send_packet, simulate,
                                     stream_put)
from apiary.tile import TileEnv
from beehive.proto.messages import PACKET_META, packet_format

MAC, IPV4 = "02:00:00:00:00:02", "10.0.0.2"
PEER_MAC, PEER_IP = "52:54:00:12:34:56", "10.0.0.1"
WIDTHS = [64, 512]
SEEDS = [1, 2]
HERE = (1, 1)                   # where the tile under test sits


def make_tile(cls, width, routes=None, *, settings=None, **params):
    """``cls`` at :data:`HERE`, routing ``{key: (x, y)}`` on the data plane, with the
    design's addresses :data:`MAC` and :data:`IPV4` (and any other ``settings``)."""
    table = {key: [Endpoint(f"hop{x}{y}", x, y)] for key, (x, y) in (routes or {}).items()}
    env = TileEnv(name="dut", x=HERE[0], y=HERE[1], width=width, routes={"data": table},
                  settings={"mac": MAC, "ipv4": IPV4, **(settings or {})})
    return cls(env, **params)


def packet_flits(width, payload, meta=None, *, msg_type=0, dst=HERE, src=(0, 0)):
    """The flits of a message carrying ``payload`` and the metadata ``meta`` (a dict of
    :data:`PACKET_META` fields), as a tile's :class:`~apiary.noc.framing.MessageSender` frames
    it: the fields of ``msg_type``'s level (:func:`~beehive.proto.messages.packet_format`),
    inline in the header flit at 512 bits, in metadata flits below, and the type's head payload
    bytes in the header flit (:func:`~apiary.noc.spec.head_bytes`)."""
    header = NocHeader(dst_x=dst[0], dst_y=dst[1], src_x=src[0], src_y=src[1],
                       msg_type=int(getattr(msg_type, "value", msg_type)))
    bits = packet_format(msg_type).size
    value = PACKET_META.pack(meta or {}) & ((1 << bits) - 1)
    return meta_message_flits(width, header, value, bits, payload,
                              head=head_bytes(width, msg_type))


@dataclass
class Decoded:
    header: NocHeader
    meta: dict
    payload: bytes


def decode(flits, width):
    """A message a tile sent: its header, its metadata fields (those of its type's level),
    its payload."""
    msg_type = NocHeader.unpack([f[0] if isinstance(f, tuple) else f for f in flits],
                                width).msg_type
    header, meta, payload = decode_meta_message(flits, width, packet_format(msg_type).size,
                                                head_bytes(width, msg_type))
    return Decoded(header, PACKET_META.unpack(meta), payload)


@dataclass
class Run:
    out: list = field(default_factory=list)         # Decoded messages, or frames (bytes)
    counters: dict = field(default_factory=dict)


def counters_of(tile):
    return list(tile.signature.members["counters"].signature.members)


def run(tile, width, inputs, expect, *, seed=1, stall=0.3, gaps=0.3, frames_in=False,
        frames_out=False, settle=500):
    """Send ``inputs`` into ``tile``, collect the ``expect`` messages (or frames) it sends, then
    check for ``settle`` cycles that it sends nothing more, and read its counters; with seeded
    random gaps on the input and back-pressure on the output.

    ``inputs`` are ``(payload, meta, msg_type)`` messages for ``noc_in``, or with ``frames_in``
    frames (bytes, or a list of payload words for a malformed one) for ``mac_rx``. Output is
    decoded messages from ``noc_out``, or with ``frames_out`` frames from ``mac_tx``."""
    rng = random.Random(seed)
    result = Run()
    out_port = tile.mac_tx if frames_out else tile.noc_out

    async def source(ctx):
        for item in inputs:
            if frames_in and isinstance(item, list):
                for word in item:
                    await stream_put(ctx, tile.mac_rx, word, rng=rng, stall=gaps)
            elif frames_in:
                await send_packet(ctx, tile.mac_rx, item, width, rng=rng, stall=gaps)
            else:
                payload, meta, msg_type = item
                await send_flits(ctx, tile.noc_in, packet_flits(width, payload, meta,
                                                                msg_type=msg_type),
                                 rng=rng, stall=gaps)

    async def sink(ctx):
        for _ in range(expect):
            if frames_out:
                result.out.append(await recv_packet(ctx, out_port, width, rng=rng, stall=stall))
            else:
                flits = await recv_flits(ctx, out_port, rng=rng, stall=stall)
                result.out.append(decode(flits, width))
        ctx.set(out_port.ready, 1)
        for _ in range(settle):
            assert not ctx.get(out_port.valid), f"more than the {expect} outputs expected"
            await ctx.tick()
        for name in counters_of(tile):
            result.counters[name] = ctx.get(getattr(tile.counters, name))

    simulate(tile, sink, background=[source], timeout=200_000)
    return result


def aborted_frame(frame, width):
    """The payload words of ``frame`` with its last word turned into an abort (a MAC that saw
    a bad FCS)."""
    words = packet_words(frame, width)
    words[-1] = dict(words[-1], nbytes=width // 8 + 1)
    return words


def dropped(counters):
    """The counters that are not ``forwarded``, without the zeros."""
    return {k: v for k, v in counters.items() if k != "forwarded" and v}


def bad_then_good(bad, good):
    """Each malformed input of ``bad`` (``{reason: input}``) followed by the good one."""
    return [item for malformed in bad.values() for item in (malformed, good)]


def assert_each_dropped_once(run, bad, inputs):
    """Every reason of ``bad`` counted exactly once, nothing else dropped, and the counters add
    up to the inputs (each counted once, under one reason or ``forwarded``)."""
    assert dropped(run.counters) == {reason: 1 for reason in bad}
    assert sum(run.counters.values()) == len(inputs)
