"""FLD-E, FlexDriver's echo accelerator (the paper's Table 6), in Amaranth, behind the FLD module:
UDP datagrams to its address come back with their addresses and ports swapped, ARP requests for
its address are answered.

It takes FLD's receive stream as FLD requires (never waiting: a packet that finds no free slot
is dropped and counted in ``overflow``) into ``slots`` slots of ``slot_bytes``, keeps each
packet's first 64 bytes beside it, and decides once the packet is in: an IPv4 datagram without
options, UDP, to ``ip``, whose checksums the NIC verified (``IP_OK``, ``L4_OK`` in the
completion's checks; else ``bad_checksum``) is echoed: the Ethernet, IPv4 and UDP sources and
destinations swapped, which leaves both checksums right; an ARP request for ``ip`` is answered
with ``mac``; anything else is dropped (``ignored``). The answer goes out on send queue
``meta.queue mod queues`` as soon as that queue has credit, its first words rewritten on the
way, the rest read from the slot, a word a cycle.
"""

from types import SimpleNamespace
from typing import Any

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory

from apiary.stream.counters import count
from apiary.stream.integers import power_of_two
from apiary.stream.layout import abort_nbytes, check_width
from .fields import (bytes_at, checksums_verified, field_of, head_with_word, lanes_of,
                     udp_over_ipv4_to)
from .fld import FldMap, FldTop, accelerator_members


__all__ = ["FldEcho", "FldEchoTop", "ECHO_COUNTERS", "HEAD_BYTES"]

#: Bytes of each packet kept beside it (Ethernet, IPv4 and UDP headers, or an ARP packet).
HEAD_BYTES = 64

ECHO_COUNTERS = {
    "echoed": "UDP datagrams echoed",
    "arp_replies": "ARP requests for the address answered",
    "ignored": "packets neither (another address, protocol, IPv4 options), dropped",
    "bad_checksum": "UDP datagrams whose checksums the NIC did not verify, dropped",
    "overflow": "packets that found no free slot (or were longer than one), dropped",
}


class FldEcho(wiring.Component):
    """See the module docstring: at data width ``width``, answering as ``mac`` and ``ip``
    (integers), with FLD's ``rx_queues`` and ``queues`` (send queues)."""

    def __init__(self, width: int, *, mac: int, ip: int, queues: int = 2, rx_queues: int = 1,
                 slots: int = 4, slot_bytes: int = 2048) -> None:
        check_width(width)
        if not (power_of_two(slots) and slots >= 2 and power_of_two(slot_bytes)
                and slot_bytes >= HEAD_BYTES and slot_bytes % (width // 8) == 0):
            raise ValueError("slots (at least 2) and slot_bytes (at least 64, whole words) "
                             "must be powers of two")
        self.width, self.mac, self.ip = width, mac, ip
        self.queues, self.slots, self.slot_bytes = queues, slots, slot_bytes
        super().__init__(accelerator_members(width, queues=queues, rx_queues=rx_queues,
                                             counters=ECHO_COUNTERS))

    def elaborate(self, platform: object) -> Module:
        m = Module()
        nb = self.width // 8
        wps = self.slot_bytes // nb                 # words per slot
        wbits = (wps - 1).bit_length()
        sbits = (self.slots - 1).bit_length()
        m.submodules.buffer = buf = Memory(shape=self.width, depth=self.slots * wps, init=[])
        wr, rd = buf.write_port(), buf.read_port(transparent_for=())
        heads = Array(Signal(8 * HEAD_BYTES, name=f"head{k}") for k in range(self.slots))
        lengths = Array(Signal(range(self.slot_bytes + 1), name=f"length{k}")
                        for k in range(self.slots))
        queues = Array(Signal(range(self.queues), name=f"queue{k}") for k in range(self.slots))
        # Slots are filled and emptied in turn: ``w_slot`` being written, ``r_slot`` next out.
        w_slot, r_slot = Signal(sbits), Signal(sbits)
        full_slots = Signal(range(self.slots + 1))
        filled, emptied = Signal(), Signal()
        m.d.sync += full_slots.eq(full_slots + filled - emptied)
        if sbits:
            m.d.sync += [w_slot.eq(w_slot + filled), r_slot.eq(r_slot + emptied)]
        slots = SimpleNamespace(heads=heads, lengths=lengths, queues=queues, w_slot=w_slot,
                                r_slot=r_slot, full=full_slots, filled=filled,
                                emptied=emptied, wps=wps, wbits=wbits)
        self._write(m, wr, slots)
        self._read(m, rd, slots)
        return m

    def _write(self, m: Module, wr: Any, s: SimpleNamespace) -> None:
        """Packets in, never waiting; each decided in the cycle its last word comes."""
        heads, lengths, queues, w_slot = s.heads, s.lengths, s.queues, s.w_slot
        full_slots, filled, wps, wbits = s.full, s.filled, s.wps, s.wbits
        nb, c = self.width // 8, self.counters
        i, p = self.rx, self.rx.payload
        word = Signal(range(wps + 1))
        length = Signal(range(self.slot_bytes + 1 + nb))
        keep = Signal()                             # the packet has a slot
        head = heads[w_slot]
        m.d.comb += [i.ready.eq(1), wr.data.eq(p.data), wr.addr.eq(Cat(word[:wbits], w_slot))]
        head_next = head_with_word(m, head, word, p.data)
        kind = self._kind(m, head_next, p.meta.checks)
        with m.If(i.valid):
            first = word == 0
            start_keep = first & (full_slots < self.slots)
            now_keep = Mux(first, start_keep, keep)
            fits = word < wps
            aborted = p.nbytes == abort_nbytes(self.width)
            with m.If(first & ~start_keep):
                count(m, c.overflow)
            m.d.comb += wr.en.eq(now_keep & fits & ~aborted)
            m.d.sync += [keep.eq(now_keep), length.eq(Mux(first, 0, length) + p.nbytes),
                         word.eq(word + 1)]
            with m.If(now_keep):
                m.d.sync += head.eq(head_next)
            with m.If(p.last):
                m.d.sync += [word.eq(0), queues[w_slot].eq(p.meta.queue % self.queues),
                             lengths[w_slot].eq(Mux(first, 0, length) + p.nbytes)]
                with m.If(now_keep & (~fits | aborted)):
                    count(m, c.overflow)
                with m.Elif(now_keep & kind.udp & kind.checked):
                    count(m, c.echoed)
                    m.d.sync += head.eq(kind.echo)
                    m.d.comb += filled.eq(1)
                with m.Elif(now_keep & kind.udp):
                    count(m, c.bad_checksum)
                with m.Elif(now_keep & kind.arp):
                    count(m, c.arp_replies)
                    m.d.sync += head.eq(kind.arp_reply)
                    m.d.comb += filled.eq(1)
                with m.Elif(now_keep):
                    count(m, c.ignored)

    def _kind(self, m: Module, h: Any, checks: Any) -> SimpleNamespace:
        """What packet head ``h`` is (``udp``, ``arp``; ``checked``: the completion's
        ``checks`` say both checksums were verified), and the heads of its answers (``echo``,
        ``arp_reply``)."""
        kind = SimpleNamespace(udp=Signal(name="is_udp"), arp=Signal(name="is_arp"),
                               checked=Signal(name="checked"))
        m.d.comb += [
            kind.udp.eq(udp_over_ipv4_to(h, self.ip)),
            kind.arp.eq((field_of(h, 12, 2) == 0x0806) & (field_of(h, 14, 2) == 1)
                        & (field_of(h, 16, 2) == 0x0800) & (h[8 * 18:8 * 19] == 6)
                        & (h[8 * 19:8 * 20] == 4) & (field_of(h, 20, 2) == 1)
                        & (field_of(h, 38, 4) == self.ip)),
            kind.checked.eq(checksums_verified(checks)),
        ]

        def raw(first: int, n: int) -> Any:
            return bytes_at(h, first, n)

        mac, ip = lanes_of(self.mac, 6), lanes_of(self.ip, 4)
        kind.echo = Cat(raw(6, 6), raw(0, 6), raw(12, 14), raw(30, 4), raw(26, 4), raw(36, 2),
                        raw(34, 2), raw(38, HEAD_BYTES - 38))
        kind.arp_reply = Cat(raw(6, 6), mac, raw(12, 8), lanes_of(2, 2), mac, ip, raw(22, 6),
                             raw(28, 4), raw(42, HEAD_BYTES - 42))
        return kind

    def _read(self, m: Module, rd: Any, s: SimpleNamespace) -> None:
        """Answers out, a slot at a time, once its queue has credit."""
        heads, lengths, queues, r_slot = s.heads, s.lengths, s.queues, s.r_slot
        full_slots, emptied, wps, wbits = s.full, s.emptied, s.wps, s.wbits
        nb = self.width // 8
        o = self.tx
        head = heads[r_slot]
        length = lengths[r_slot]
        queue = queues[r_slot]
        words = Signal(range(wps + 1))
        m.d.comb += words.eq((length + nb - 1) >> (nb.bit_length() - 1))
        fetched, sent = Signal(range(wps + 1)), Signal(range(wps + 1))
        have = Signal()
        head_words = -(-HEAD_BYTES // nb)
        m.d.comb += rd.en.eq(0)
        with m.FSM(name="echo_out"):
            with m.State("IDLE"):
                m.d.sync += [fetched.eq(0), sent.eq(0), have.eq(0)]
                m.d.comb += self.credit_queue.eq(queue)
                with m.If((full_slots != 0) & (self.credit != 0)):
                    m.next = "SEND"
            with m.State("SEND"):
                taken = o.valid & o.ready
                fetch = (~have | taken) & (fetched < words)
                m.d.comb += [rd.addr.eq(Cat(fetched[:wbits], r_slot)), rd.en.eq(fetch)]
                m.d.sync += have.eq(fetch | (have & ~taken))
                with m.If(fetch):
                    m.d.sync += fetched.eq(fetched + 1)
                data_word = Signal(self.width)
                m.d.comb += data_word.eq(rd.data)
                for k in range(head_words):         # the rewritten head over the first words
                    with m.If(sent == k):
                        lo, hi = k * self.width, min((k + 1) * self.width, 8 * HEAD_BYTES)
                        m.d.comb += data_word[:hi - lo].eq(head[lo:hi])
                last = sent + 1 == words
                m.d.comb += [o.valid.eq(have), o.payload.data.eq(data_word),
                             o.payload.nbytes.eq(Mux(last, length - sent * nb, nb)),
                             o.payload.last.eq(last), o.payload.meta.queue.eq(queue),
                             o.payload.meta.flags.eq(0)]
                with m.If(taken):
                    m.d.sync += sent.eq(sent + 1)
                    with m.If(last):
                        m.d.comb += emptied.eq(1)
                        m.next = "IDLE"


class FldEchoTop(FldTop):
    """FLD with the echo behind it (:class:`~flexdriver.fld.FldTop`)."""

    def __init__(self, width: int, *, mac: int, ip: int, fld_map: FldMap | None = None) -> None:
        fld_map = fld_map or FldMap()
        super().__init__(width, FldEcho(width, mac=mac, ip=ip, queues=fld_map.queues,
                                        rx_queues=fld_map.rx_queues), fld_map)
