"""The Reed-Solomon encoder behind FLD: Beehive's RS(8,2) core
(:class:`beehive.apps.reed_solomon.RsEncoder`) as an accelerator that uses the NIC's offloads
instead of a network stack.

A UDP datagram to ``ip``, port ``port``, of ``8 * shard_bytes`` bytes (eight data shards) is
answered with a datagram of ``2 * shard_bytes`` bytes: the two parity shards, as ``reedsolo``
computes them. The datagram streams through (no store and forward): its first 42 bytes (the
Ethernet, IPv4 and UDP headers) are kept, the rest go to the encoder as they come, and the
answer's headers (addresses and ports swapped, the lengths set, the checksums left for the NIC:
``L3_CSUM | L4_CSUM``) are put in front of the parity shards on the way out, once the send
queue has credit.

What it takes is decided when the headers are in: a datagram that is not IPv4 without options,
UDP, to ``ip`` and ``port`` (``ignored``), whose checksums the NIC did not verify
(``bad_checksum``) or that is not ``8 * shard_bytes`` bytes (``bad_length``) is dropped and
counted. It serves one request at a time: one that comes while the previous answer waits to
leave (for credit, or for FLD's transmit side) is dropped too (``busy``), so that the encoder
never holds a request's final shard and FLD's receive stream never waits.
"""

from types import SimpleNamespace
from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import connect

from apiary.stream.counters import count
from apiary.stream.layout import abort_nbytes, check_width
from apiary.stream.queue import Queue
from apiary.stream.realign import StreamInsert, StreamStrip
from beehive.apps.reed_solomon import RsEncoder
from .fields import (bytes_at, checksums_verified, field_of, head_with_word, lanes_of,
                     udp_over_ipv4_to)
from .fld import FldMap, FldTop, accelerator_members
from .fld_echo import HEAD_BYTES
from .formats import L3_CSUM, L4_CSUM


__all__ = ["FldRs", "FldRsTop", "RS_COUNTERS", "RS_PORT", "UDP_HEADERS"]

#: The encoder's UDP port.
RS_PORT = 9000
#: Bytes of Ethernet, IPv4 (without options) and UDP headers in front of a datagram.
UDP_HEADERS = 42

RS_COUNTERS = {
    "answered": "requests whose parity shards went out",
    "ignored": "packets not for the encoder (another address, port or protocol), dropped",
    "bad_checksum": "requests whose checksums the NIC did not verify, dropped",
    "bad_length": "requests that were not eight whole shards, dropped",
    "busy": "requests that came while an answer was still waiting to leave, dropped",
}


class FldRs(wiring.Component):
    """See the module docstring: at data width ``width``, answering as ``mac`` and ``ip``
    (integers) on UDP ``port``, shards of ``shard_bytes`` (whole words), with FLD's
    ``rx_queues`` and ``queues`` (send queues; an answer goes out on ``meta.queue mod
    queues``)."""

    def __init__(self, width: int, *, mac: int, ip: int, port: int = RS_PORT,
                 shard_bytes: int = 64, queues: int = 2, rx_queues: int = 1) -> None:
        check_width(width)
        self.width, self.mac, self.ip, self.port = width, mac, ip, port
        self.shard_bytes, self.queues = shard_bytes, queues
        self.encoder = RsEncoder(width, shard_bytes)
        super().__init__(accelerator_members(width, queues=queues, rx_queues=rx_queues,
                                             counters=RS_COUNTERS))

    def elaborate(self, platform: object) -> Module:
        m = Module()
        nb, c = self.width // 8, self.counters
        m.submodules.encoder = enc = self.encoder
        m.submodules.strip = strip = StreamStrip(self.width, UDP_HEADERS, fixed=True)
        m.submodules.insert = insert = StreamInsert(self.width, UDP_HEADERS, fixed=True)
        # The answers' headers, in request order (at most two requests are in the encoder).
        m.submodules.answers = answers = Queue(data.StructLayout({
            "head": 8 * UDP_HEADERS, "queue": len(self.tx.payload.meta.queue)}), 4)

        i, p = self.rx, self.rx.payload
        last_counted = HEAD_BYTES // nb + 1
        word = Signal(range(last_counted + 1))          # words of the packet so far (capped)
        head = Signal(8 * HEAD_BYTES)
        head_next = head_with_word(m, head, word, p.data)
        headers_in = Signal()                           # bytes 0-41 are in head_next
        m.d.comb += headers_in.eq((word + 1) * nb >= UDP_HEADERS)
        # One request at a time: taken only while no answer waits, so that the encoder never
        # holds its final shard (and FLD's receive stream never waits).
        verdict = self._verdict(m, head_next, p.meta, busy=answers.o.valid)
        taking = Signal()                               # this packet goes to the encoder
        decided = Signal()
        aborted = p.nbytes == abort_nbytes(self.width)

        # The payload to the encoder through the strip; the stripped words are discarded when
        # the packet is not taken (the decision comes with the word that completes the
        # headers, before the strip's first output word).
        m.d.comb += [strip.i.payload.data.eq(p.data), strip.i.payload.nbytes.eq(p.nbytes),
                     strip.i.payload.last.eq(p.last), strip.i.valid.eq(i.valid),
                     i.ready.eq(strip.i.ready)]
        take_now = Mux(decided, taking, verdict.take)
        m.d.comb += [enc.i.payload.eq(strip.o.payload), enc.i.valid.eq(strip.o.valid & take_now),
                     strip.o.ready.eq(Mux(take_now, enc.i.ready, 1))]
        with m.If(i.valid & i.ready):
            m.d.sync += word.eq(Mux(word == last_counted, word, word + 1))
            with m.If(word * nb < HEAD_BYTES):
                m.d.sync += head.eq(head_next)
            with m.If(headers_in & ~decided):
                m.d.sync += [decided.eq(1), taking.eq(verdict.take)]
                with m.If(verdict.ignored):
                    count(m, c.ignored)
                with m.Elif(verdict.bad_checksum):
                    count(m, c.bad_checksum)
                with m.Elif(verdict.bad_length):
                    count(m, c.bad_length)
                with m.Elif(verdict.busy):
                    count(m, c.busy)
            with m.If(p.last):
                m.d.sync += [word.eq(0), decided.eq(0), taking.eq(0)]
                # A request taken whole: its answer's header waits for the parity.
                m.d.comb += [answers.i.valid.eq(take_now & ~aborted),
                             answers.i.payload.head.eq(self._answer_head(head_next)),
                             answers.i.payload.queue.eq(p.meta.queue % self.queues)]

        # Out: the answer's headers in front of the parity shards, once the queue has credit.
        a = answers.o.payload
        m.d.comb += self.credit_queue.eq(a.queue)
        credit = self.credit != 0
        started = Signal()                              # the answer's header is offered
        m.d.comb += [insert.hdr.payload.data.eq(a.head),
                     insert.hdr.valid.eq(answers.o.valid & (credit | started))]
        with m.If(insert.hdr.valid):                    # (held until taken, credit or not)
            m.d.sync += started.eq(1)
        connect(m, enc=enc.o, insert=insert.i)
        o = self.tx
        m.d.comb += [o.valid.eq(insert.o.valid), o.payload.data.eq(insert.o.payload.data),
                     o.payload.nbytes.eq(insert.o.payload.nbytes),
                     o.payload.last.eq(insert.o.payload.last), o.payload.meta.queue.eq(a.queue),
                     o.payload.meta.flags.eq(L3_CSUM | L4_CSUM), insert.o.ready.eq(o.ready)]
        with m.If(o.valid & o.ready & o.payload.last):
            count(m, c.answered)
            m.d.comb += answers.o.ready.eq(1)
            m.d.sync += started.eq(0)
        return m

    def _verdict(self, m: Module, h: Any, meta: Any, busy: Any) -> SimpleNamespace:
        """Whether the packet whose headers are ``h`` (and completion ``meta``) is a request to
        take, and if not why (``busy``: an answer still waits)."""
        v = SimpleNamespace(**{n: Signal(name=n) for n in (
            "ignored", "bad_checksum", "bad_length", "busy", "take")})
        udp_to_us = udp_over_ipv4_to(h, self.ip) & (field_of(h, 36, 2) == self.port)
        m.d.comb += [
            v.ignored.eq(~udp_to_us),
            v.bad_checksum.eq(~checksums_verified(meta.checks)),
            v.bad_length.eq(meta.length != UDP_HEADERS + 8 * self.shard_bytes),
            v.busy.eq(busy),
            v.take.eq(~v.ignored & ~v.bad_checksum & ~v.bad_length & ~v.busy),
        ]
        return v

    def _answer_head(self, h: Any) -> Any:
        """The 42 header bytes of the answer to the request whose headers are ``h``: to its
        sender, from ``mac``, ``ip`` and ``port``, the lengths of two shards, the checksums
        zero (the NIC fills them in)."""
        def raw(first: int, n: int) -> Any:
            return bytes_at(h, first, n)
        parity = 2 * self.shard_bytes
        return Cat(raw(6, 6), lanes_of(self.mac, 6), lanes_of(0x0800, 2),
                   lanes_of(0x4500, 2), lanes_of(20 + 8 + parity, 2), lanes_of(0, 4),
                   lanes_of(0x40, 1), lanes_of(17, 1), Const(0, 16), lanes_of(self.ip, 4),
                   raw(26, 4), lanes_of(self.port, 2), raw(34, 2), lanes_of(8 + parity, 2),
                   Const(0, 16))


class FldRsTop(FldTop):
    """FLD with the encoder behind it (:class:`~flexdriver.fld.FldTop`)."""

    def __init__(self, width: int, *, mac: int, ip: int, port: int = RS_PORT,
                 shard_bytes: int = 64, fld_map: FldMap | None = None) -> None:
        fld_map = fld_map or FldMap()
        super().__init__(width, FldRs(width, mac=mac, ip=ip, port=port, shard_bytes=shard_bytes,
                                      queues=fld_map.queues, rx_queues=fld_map.rx_queues),
                         fld_map)
