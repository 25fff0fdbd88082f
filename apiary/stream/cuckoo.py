"""A cuckoo hash table with a stash: keys to values in ``banks`` memories, one cycle a lookup.

FlexDriver maps each transmit queue's ring addresses onto one shared pool of descriptors this way
(ASPLOS'22, §5: "a 4-bank cuckoo hash-table (load factor ½)"; a new entry that collides evicts an
old one to a stash of four, which then tries to put it in another bank, and so on; a full stash
stalls insertions until an entry is removed; the table is twice the entries it must hold, so
insertion converges). Each key has one place in each bank, given by that bank's hash
(:func:`bank_hashes`, H3: each index bit the parity of the key under a fixed mask, chosen by a
seeded generator), so a lookup reads ``banks`` places at once and compares them and the stash.

Commands and answers are streams (:func:`cuckoo_command`, :func:`cuckoo_answer`), one command at
a time, answered in order:

=========  ===================================================================================
op         what the table does, and answers
=========  ===================================================================================
LOOKUP     ``found`` and ``value`` of ``key``
INSERT     ``key`` → ``value`` (replacing the value of a key already there); ``found``: it was
           there. Waits (``command.ready`` low) while the stash is full and the key is not
           already there, until a REMOVE or the stash's own retries make room
REMOVE     the key's entry, if any (``found``)
=========  ===================================================================================

Timing: a command is taken in one cycle, the banks are read in the next, and it is answered in
the one after (3 cycles, one command each 3 cycles while ``answer`` is ready). Between commands
the table moves a stash entry into the banks: when one of its places is free, there; when none
is, into one (the banks taken in turn), whose entry takes the stash slot. ``evictions`` counts
the entries moved out of a bank, ``stash_used`` says how many stash entries are taken now.
"""

import random
from collections.abc import Sequence

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .integers import power_of_two


__all__ = ["CuckooOp", "CuckooTable", "bank_hashes", "cuckoo_places", "cuckoo_command",
           "cuckoo_answer"]


class CuckooOp(enum.Enum, shape=2):
    LOOKUP = 0
    INSERT = 1
    REMOVE = 2


def cuckoo_command(key_bits: int, value_bits: int) -> data.StructLayout:
    """A command: ``op``, ``key``, ``value`` (INSERT's)."""
    return data.StructLayout({"op": CuckooOp, "key": key_bits, "value": value_bits})


def cuckoo_answer(value_bits: int) -> data.StructLayout:
    """An answer: the command's ``op``, ``found`` (the key was there) and its ``value``."""
    return data.StructLayout({"op": CuckooOp, "found": 1, "value": value_bits})


def bank_hashes(key_bits: int, index_bits: int, banks: int, seed: int = 0x5EED) -> list[list[int]]:
    """The masks of each bank's hash: index bit ``i`` of bank ``b`` is the parity of
    ``key & masks[b][i]``."""
    rng = random.Random(seed)
    return [[rng.getrandbits(key_bits) | 1 << i % key_bits for i in range(index_bits)]
            for _ in range(banks)]


def _place(key: int, masks: Sequence[int]) -> int:
    return sum((bin(key & mask).count("1") & 1) << i for i, mask in enumerate(masks))


def cuckoo_places(key: int, masks: Sequence[Sequence[int]]) -> list[int]:
    """The place of ``key`` in each bank (Python, as the hardware computes it)."""
    return [_place(key, bank) for bank in masks]


class CuckooTable(wiring.Component):
    """A cuckoo hash table (see the module docstring): ``banks`` memories of ``depth`` entries
    (a power of two) of ``key_bits``-bit keys and ``value_bits``-bit values, and a stash of
    ``stash`` entries.

    Members: ``command`` (In stream of :func:`cuckoo_command`), ``answer`` (Out stream of
    :func:`cuckoo_answer`), ``stash_used`` (Out: stash entries now), ``evictions`` (Out, a
    count).
    """

    def __init__(self, key_bits: int, value_bits: int, depth: int, *, banks: int = 4,
                 stash: int = 4, seed: int = 0x5EED) -> None:
        if not (power_of_two(depth) and depth >= 2):
            raise ValueError(f"depth must be a power of two of at least 2, not {depth!r}")
        if banks < 2 or stash < 1:
            raise ValueError(f"a cuckoo table needs 2 or more banks and a stash, not {banks} "
                             f"banks and {stash} stash entries")
        self.key_bits, self.value_bits, self.depth = key_bits, value_bits, depth
        self.banks, self.stash_entries = banks, stash
        self.masks = bank_hashes(key_bits, (depth - 1).bit_length(), banks, seed)
        super().__init__({
            "command": In(stream.Signature(cuckoo_command(key_bits, value_bits))),
            "answer": Out(stream.Signature(cuckoo_answer(value_bits))),
            "stash_used": Out(range(stash + 1)),
            "evictions": Out(32),
        })

    def _hash(self, key: Signal, bank: int) -> Signal:
        return Cat(*((key & mask).xor() for mask in self.masks[bank]))

    def elaborate(self, platform: object) -> Module:
        m = Module()
        nb, ns = self.banks, self.stash_entries
        entry = data.StructLayout({"valid": 1, "key": self.key_bits, "value": self.value_bits})
        reads, writes = [], []
        for b in range(nb):
            mem = Memory(shape=entry, depth=self.depth, init=[])
            m.submodules[f"bank{b}"] = mem
            reads.append(mem.read_port(transparent_for=()))
            writes.append(mem.write_port())
        stash = Array(Signal(entry, name=f"stash{s}") for s in range(ns))

        # The entry being placed: a command's key (and value), or a stash entry being retried.
        key = Signal(self.key_bits)
        value = Signal(self.value_bits)
        op = Signal(CuckooOp)
        from_stash = Signal()               # retrying stash entry ``slot`` (else a command)
        slot = Signal(range(ns))
        places = [Signal(range(self.depth), name=f"place{b}") for b in range(nb)]
        victim = Signal(range(nb))          # the bank to evict from when every place is taken
        answer = Signal(cuckoo_answer(self.value_bits))

        free = Cat(s.valid == 0 for s in stash)
        used = Signal(range(ns + 1))
        m.d.comb += [used.eq(sum(s.valid for s in stash)), self.stash_used.eq(used)]
        first_free = Signal(range(ns))
        first_used = Signal(range(ns))
        for s in reversed(range(ns)):
            with m.If(free[s]):
                m.d.comb += first_free.eq(s)
            with m.If(stash[s].valid):
                m.d.comb += first_used.eq(s)

        cmd = self.command.payload
        hit_stash = Cat(stash[s].valid & (stash[s].key == cmd.key) for s in range(ns))

        def read(address_key: Signal) -> None:
            for b in range(nb):
                m.d.comb += reads[b].addr.eq(self._hash(address_key, b))
                m.d.sync += places[b].eq(self._hash(address_key, b))

        with m.FSM():
            with m.State("IDLE"):
                stalls = (cmd.op == CuckooOp.INSERT) & (used == ns) & ~hit_stash.any()
                m.d.comb += self.command.ready.eq(~stalls)
                with m.If(self.command.valid & ~stalls):
                    m.d.sync += [key.eq(cmd.key), value.eq(cmd.value), op.eq(cmd.op),
                                 from_stash.eq(0)]
                    read(cmd.key)
                    m.next = "CHECK"
                with m.Elif(used != 0):                     # retry a stash entry meanwhile
                    retry = stash[first_used]
                    m.d.sync += [key.eq(retry.key), value.eq(retry.value),
                                 op.eq(CuckooOp.INSERT), from_stash.eq(1), slot.eq(first_used)]
                    read(retry.key)
                    m.next = "CHECK"
            with m.State("CHECK"):
                in_bank = Cat(r.data.valid & (r.data.key == key) for r in reads)
                in_stash = Cat(stash[s].valid & (stash[s].key == key) & ~(from_stash & (slot == s))
                               for s in range(ns))
                empty = Cat(~r.data.valid for r in reads)
                found = in_bank.any() | in_stash.any()
                found_value = Signal(self.value_bits)
                for b in reversed(range(nb)):
                    with m.If(in_bank[b]):
                        m.d.comb += found_value.eq(reads[b].data.value)
                for s in reversed(range(ns)):
                    with m.If(in_stash[s]):
                        m.d.comb += found_value.eq(stash[s].value)
                m.d.sync += [answer.op.eq(op), answer.found.eq(found),
                             answer.value.eq(found_value)]
                new = Signal(entry)
                m.d.comb += [new.valid.eq(1), new.key.eq(key), new.value.eq(value)]

                def write(b: int, what: object) -> None:
                    m.d.comb += [writes[b].addr.eq(places[b]), writes[b].data.eq(what),
                                 writes[b].en.eq(1)]

                with m.Switch(op):
                    with m.Case(CuckooOp.REMOVE):
                        for b in range(nb):
                            with m.If(in_bank[b]):
                                write(b, 0)
                        for s in range(ns):
                            with m.If(in_stash[s]):
                                m.d.sync += stash[s].valid.eq(0)
                    with m.Case(CuckooOp.INSERT):
                        with m.If(found):                   # (a command's key: replace)
                            for b in range(nb):
                                with m.If(in_bank[b]):
                                    write(b, new)
                            for s in range(ns):
                                with m.If(in_stash[s]):
                                    m.d.sync += stash[s].value.eq(value)
                        with m.Elif(empty.any()):
                            chosen = Signal(range(nb))
                            for b in reversed(range(nb)):
                                with m.If(empty[b]):
                                    m.d.comb += chosen.eq(b)
                            for b in range(nb):
                                with m.If(chosen == b):
                                    write(b, new)
                            with m.If(from_stash):
                                m.d.sync += stash[slot].valid.eq(0)
                        with m.Else():                      # evict into the stash
                            evicted = Array(r.data.as_value() for r in reads)[victim]
                            for b in range(nb):
                                with m.If(victim == b):
                                    write(b, new)
                            target = Mux(from_stash, slot, first_free)
                            m.d.sync += [stash[target].eq(evicted),
                                         victim.eq(Mux(victim == nb - 1, 0, victim + 1)),
                                         self.evictions.eq(self.evictions + 1)]
                with m.If(from_stash):
                    m.next = "IDLE"
                with m.Else():
                    m.next = "ANSWER"
            with m.State("ANSWER"):
                m.d.comb += [self.answer.valid.eq(1), self.answer.payload.eq(answer)]
                with m.If(self.answer.ready):
                    m.next = "IDLE"
        return m

