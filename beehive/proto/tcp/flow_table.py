"""The TCP engine's flow table: a connection's peer address and ports → its flow slot.

The design has one IPv4 address, so the 4-tuple of a segment reduces to the three fields that
vary: the peer's address and port and the local port (:data:`FLOW_KEY`). The table is a
set-associative hash table: ``flows / ways`` buckets of ``ways`` entries, the bucket chosen by
a hash of the key, and the slot of an entry is its place, ``bucket * ways + way``, so freeing a
slot needs no search.
"""

from amaranth import Cat, Module, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .state import slot_bits


__all__ = ["FLOW_KEY", "FlowTable", "flow_hash"]


#: What names a connection (the local address is the design's own).
FLOW_KEY = data.StructLayout({"peer_ip": 32, "peer_port": 16, "local_port": 16})


def _fold(value, bits):
    chunks = [value[i:i + bits] for i in range(0, len(value), bits)]
    out = chunks[0]
    for chunk in chunks[1:]:
        out = out ^ chunk
    return out[:bits]


def flow_hash(key, bits: int):
    """The bucket of ``key`` (a :data:`FLOW_KEY` value), ``bits`` wide: the address XORed with
    the ports rotated by 7 bits, folded. Not keyed: a peer that picks its ports can aim at one
    bucket, which costs it (and only new connections in that bucket) the bucket's ``ways``
    entries; the half-open bound caps what a SYN flood holds."""
    if bits == 0:
        return 0
    ports = Cat(key.peer_port, key.local_port)
    mixed = key.peer_ip ^ ports.rotate_left(7)
    return _fold(mixed, bits)


class FlowTable(wiring.Component):
    """Look a flow key up, and add or remove entries.

    ``lookup`` with ``key`` in cycle *t* reads the key's bucket; in cycle *t* + 1 ``hit``,
    ``slot`` (the matching entry's), ``free`` and ``free_slot`` (the bucket's first empty
    entry, for an allocation) are valid, combinationally from the memories' read data, and
    stay so until the next ``lookup``. ``write`` in a cycle sets (``write_valid``) or clears
    the entry of ``write_slot`` to ``write_key``; a lookup in the same cycle does not see it.
    One lookup and one write per cycle.

    Parameters
    ----------
    flows : int
        Slots, a power of two.
    ways : int
        Entries per bucket, a power of two dividing ``flows``.
    """

    def __init__(self, flows: int, ways: int = 4) -> None:
        if flows < 1 or flows & (flows - 1):
            raise ValueError(f"flows must be a power of two, not {flows!r}")
        if ways < 1 or ways & (ways - 1) or ways > flows:
            raise ValueError(f"ways must be a power of two no larger than flows ({flows}), "
                             f"not {ways!r}")
        self.flows, self.ways = flows, ways
        self.bucket_bits = (flows // ways - 1).bit_length()
        bits = slot_bits(flows)
        super().__init__({
            "lookup": In(1), "key": In(FLOW_KEY),
            "hit": Out(1), "slot": Out(unsigned(bits)),
            "free": Out(1), "free_slot": Out(unsigned(bits)),
            "write": In(1), "write_valid": In(1), "write_slot": In(unsigned(bits)),
            "write_key": In(FLOW_KEY),
        })

    def elaborate(self, platform):
        m = Module()
        ways, bb = self.ways, self.bucket_bits
        way_bits = (ways - 1).bit_length()
        entry = data.StructLayout({"valid": 1, "key": FLOW_KEY})
        bucket = Signal(max(1, bb))
        m.d.comb += bucket.eq(flow_hash(self.key, bb))
        key_r = Signal(FLOW_KEY)
        bucket_r = Signal.like(bucket)
        with m.If(self.lookup):
            m.d.sync += [key_r.eq(self.key), bucket_r.eq(bucket)]

        w_way = self.write_slot[:way_bits] if way_bits else 0
        w_bucket = self.write_slot[way_bits:] if bb else 0
        hits, empties = [], []
        for way in range(ways):
            mem = m.submodules[f"way{way}"] = Memory(shape=entry, depth=max(2, 1 << bb), init=[])
            rd = mem.read_port(transparent_for=())
            wr = mem.write_port()
            m.d.comb += [
                rd.addr.eq(bucket), rd.en.eq(self.lookup),
                wr.addr.eq(w_bucket),
                wr.en.eq(self.write & (w_way == way)),
                wr.data.valid.eq(self.write_valid), wr.data.key.eq(self.write_key),
            ]
            hits.append(rd.data.valid & (rd.data.key.as_value() == key_r.as_value()))
            empties.append(~rd.data.valid)
        m.d.comb += [self.hit.eq(Cat(*hits).any()), self.free.eq(Cat(*empties).any())]
        base = Cat(Signal(way_bits), bucket_r) if way_bits else bucket_r
        for way in reversed(range(ways)):
            with m.If(hits[way]):
                m.d.comb += self.slot.eq(base | way)
            with m.If(empties[way]):
                m.d.comb += self.free_slot.eq(base | way)
        return m
