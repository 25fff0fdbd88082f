"""The TCP engine's flow table: a connection's peer address and ports → its flow slot.

The design has one IPv4 address, so the 4-tuple of a segment reduces to the three fields that
vary: the peer's address and port and the local port (:data:`FLOW_KEY`).

The table is a 2-left hash table with twice as many entries as slots, so that every slot can be
filled whatever the keys: two banks, each of ``flows / ways`` buckets of ``ways`` entries; a key
lives in its bucket of bank 0 (:func:`flow_hash`) or of bank 1 (:func:`flow_hash_alt`, a
different hash with a carry in it, so that keys that collide in one bank rarely collide in the
other), and a new key goes to the one of its two buckets with more free entries (bank 0 on a
tie). At half load a bucket of 4 overflows too rarely to measure: 4,096 random connections to
one address, 20 times over, and 4,096 from sequential ports never found both buckets full
(a single bank of ``flows`` entries, as before 2026-12-02, placed 240 of 256 sequential ports
and 3,273 of 4,096 random ones).

An entry holds its slot; the table also hands slots out, never-used ones in order and then
freed ones first-in first-out, and takes them back when the engine is done with them
(:attr:`FlowTable.release`), which may be later than the entry's removal: an aborted
connection's slot stays taken until its application has been told.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from apiary.stream.block_queue import deep_queue

from .state import slot_bits


__all__ = ["FLOW_KEY", "FlowTable", "flow_hash", "flow_hash_alt", "place_bits"]


#: What names a connection (the local address is the design's own).
FLOW_KEY = data.StructLayout({"peer_ip": 32, "peer_port": 16, "local_port": 16})


def _fold(value, bits):
    chunks = [value[i:i + bits] for i in range(0, len(value), bits)]
    out = chunks[0]
    for chunk in chunks[1:]:
        out = out ^ chunk
    return out[:bits]


def flow_hash(key, bits: int):
    """The bucket of ``key`` (a :data:`FLOW_KEY` value) in bank 0, ``bits`` wide: the address
    XORed with the ports rotated by 7 bits, folded. Not keyed: a peer that picks its ports can
    aim at one bucket in each bank, which costs it (and only new connections in those buckets)
    their entries; the half-open bound caps what a SYN flood holds."""
    if bits == 0:
        return 0
    ports = Cat(key.peer_port, key.local_port)
    return _fold(key.peer_ip ^ ports.rotate_left(7), bits)


def flow_hash_alt(key, bits: int):
    """The bucket of ``key`` in bank 1: the address XORed with the ports' halves swapped, plus
    the ports rotated by 13 (32 bits, the carry dropped), folded."""
    if bits == 0:
        return 0
    ports = Cat(key.peer_port, key.local_port)
    mixed = ((key.peer_ip ^ ports.rotate_left(16)) + ports.rotate_left(13))[:32]
    return _fold(mixed, bits)


def place_bits(ways: int) -> int:
    """Bits of a place in the table: the bank and the way (what the engine keeps per flow to
    remove its entry)."""
    return 1 + (ways - 1).bit_length()


class FlowTable(wiring.Component):
    """Look a flow key up, insert it, remove it; hand out flow slots and take them back.

    ``lookup`` with ``key`` in cycle *t* reads the key's two buckets; in cycle *t* + 1 ``hit``,
    ``slot`` and ``place`` (the matching entry's) and ``free`` (room for the key: an empty entry
    in one of its buckets and a slot to give it), ``free_slot`` and ``free_place`` are valid,
    combinationally from the memories' read data, and stay so until the next ``lookup``.

    ``insert`` (after a lookup that found ``free``, before the next lookup) puts the looked-up
    key in ``free_place`` with ``free_slot``, and hands that slot out. ``remove`` clears the
    entry of ``remove_key`` at ``remove_place`` (the ``place`` it was inserted at); ``release``
    gives ``release_slot`` back. A lookup in the same cycle does not see a write. In one cycle:
    one lookup, and one of ``insert`` and ``remove``; a ``release`` in any cycle but an
    ``insert``'s.

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
        bits, place = unsigned(slot_bits(flows)), unsigned(place_bits(ways))
        super().__init__({
            "lookup": In(1), "key": In(FLOW_KEY),
            "hit": Out(1), "slot": Out(bits), "place": Out(place),
            "free": Out(1), "free_slot": Out(bits), "free_place": Out(place),
            "insert": In(1),
            "remove": In(1), "remove_key": In(FLOW_KEY), "remove_place": In(place),
            "release": In(1), "release_slot": In(bits),
        })

    def elaborate(self, platform):
        m = Module()
        flows, ways, bb = self.flows, self.ways, self.bucket_bits
        way_bits = (ways - 1).bit_length()
        sb = slot_bits(flows)
        entry = data.StructLayout({"valid": 1, "key": FLOW_KEY, "slot": sb})
        hashes = (flow_hash, flow_hash_alt)
        key_r = Signal(FLOW_KEY)
        with m.If(self.lookup):
            m.d.sync += key_r.eq(self.key)

        # Slots: never used ones from `fresh` up, then those given back.
        fresh = Signal(range(flows + 1))
        m.submodules.freed = freed = deep_queue(unsigned(sb), flows)
        m.d.comb += [
            freed.i.valid.eq(self.release), freed.i.payload.eq(self.release_slot),
            self.free_slot.eq(Mux(fresh[-1], freed.o.payload, fresh[:sb])),
        ]
        with m.If(self.insert):
            with m.If(fresh[-1]):
                m.d.comb += freed.o.ready.eq(1)
            with m.Else():
                m.d.sync += fresh.eq(fresh + 1)

        remove_way = self.remove_place[:way_bits] if way_bits else 0
        remove_bank = self.remove_place[-1]
        hits, empties, slots = [], [], []
        for bank, hash_of in enumerate(hashes):
            bucket = Signal(max(1, bb), name=f"bucket{bank}")
            bucket_r = Signal.like(bucket, name=f"bucket{bank}_r")
            m.d.comb += bucket.eq(hash_of(self.key, bb))
            with m.If(self.lookup):
                m.d.sync += bucket_r.eq(bucket)
            bank_empties = []
            for way in range(ways):
                mem = m.submodules[f"bank{bank}_way{way}"] = Memory(
                    shape=entry, depth=max(2, 1 << bb), init=[])
                rd = mem.read_port(transparent_for=())
                wr = mem.write_port()
                here = (self.free_place == (bank << way_bits | way))
                gone = self.remove & (remove_bank == bank) & (remove_way == way)
                m.d.comb += [
                    rd.addr.eq(bucket), rd.en.eq(self.lookup),
                    wr.addr.eq(Mux(self.insert, bucket_r, hash_of(self.remove_key, bb))),
                    wr.en.eq(self.insert & here | gone),
                    wr.data.valid.eq(self.insert), wr.data.key.eq(key_r),
                    wr.data.slot.eq(self.free_slot),
                ]
                hits.append(rd.data.valid & (rd.data.key.as_value() == key_r.as_value()))
                slots.append(rd.data.slot)
                bank_empties.append(~rd.data.valid)
            empties.append(bank_empties)

        hit_any = Cat(*hits).any()
        m.d.comb += self.hit.eq(hit_any)
        for i, hit in enumerate(hits):
            with m.If(hit):
                m.d.comb += [self.slot.eq(slots[i]), self.place.eq(i)]
        # The bank with more empty entries in the key's bucket (bank 0 on a tie), its first.
        counts = [sum(e for e in bank_empties) for bank_empties in empties]
        bank1 = Signal()
        m.d.comb += bank1.eq(counts[1] > counts[0])
        for bank in reversed(range(2)):
            for way in reversed(range(ways)):
                with m.If((bank1 == bank) & empties[bank][way]):
                    m.d.comb += self.free_place.eq(bank << way_bits | way)
        room = Cat(*empties[0], *empties[1]).any()
        m.d.comb += self.free.eq(room & (~fresh[-1] | freed.o.valid))
        return m
