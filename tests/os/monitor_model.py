"""A Python reference model of the Apiary monitor (:mod:`apiary.os.monitor`), message by message.

Feed it each whole message as it enters the monitor (``from_tile`` or ``from_noc``) with the
monitor otherwise idle; it returns the messages the monitor sends in answer (``(noc, tile)``: flit
lists, exactly as they leave ``noc_out`` and ``tile_in``) and keeps the capability tables, the
quarantine and the counters as the monitor's docstring says. The rate limit is not modelled:
the caller says when a message is over it.
"""

from dataclasses import dataclass, field

from apiary.noc.framing import meta_plan
from apiary.noc.header import Fbits, header_flits, noc_header
from apiary.os.memory_tile import LOAD_MEM, LOAD_MEM_ACK, MEM_META, STORE_MEM, STORE_MEM_ACK
from apiary.os.uapi import (HANDLE_BITS, KERNEL_META, KERNEL_ONLY, OFFSET_BITS, FaultKind,
                            IpcDir, KernelMeta, KernelMsgType as K, Perm, Status,
                            kernel_message_flits)


__all__ = ["MonitorModel", "Entry", "Head"]

TILE_OPS = {K.CAP_ALLOC.value, K.CAP_FREE.value, K.CAP_SEND.value}
MONITOR_TYPES = {K.CAP_INSTALL.value, K.CAP_REVOKE.value, K.IPC_GRANT.value, K.RELEASE.value}
KERNEL_ONLY_TYPES = {t.value for t in KERNEL_ONLY}
MEM_REQUESTS = {LOAD_MEM, STORE_MEM}
MEM_ACKS = {LOAD_MEM_ACK, STORE_MEM_ACK}
COUNTERS = ("passed_out", "passed_in", "sunk_out", "sunk_in", "faults", "inbound_denied",
            "cap_ops", "installs_dropped", "kernel_denied", "rate_stalls", "quarantined")


class Head:
    """A message's head as the monitor sees it: header flits (flit 0 on top) then metadata flits,
    one integer; header fields and metadata fields read and written by name."""

    def __init__(self, width: int, flits: list, need: int) -> None:
        self.width = width
        self.nh = header_flits(width)
        self.words = [d for d, _ in flits]
        self.lasts = [last for _, last in flits]
        self.need = need
        self.short = len(flits) < need
        size = max(need, self.nh)
        words = self.words[:size] + [0] * max(0, size - len(flits))
        value = 0
        for w in words[:self.nh]:
            value = value << width | w
        for k, w in enumerate(words[self.nh:]):
            value |= w << (self.nh * width + k * width)
        self.value = value
        self.hdr = noc_header(width)

    def get(self, name: str) -> int:
        return self.value >> self.hdr.offset(name) & (1 << self.hdr.width(name)) - 1

    def set(self, name: str, v: int) -> None:
        off, n = self.hdr.offset(name), self.hdr.width(name)
        self.value = self.value & ~((1 << n) - 1 << off) | (v & (1 << n) - 1) << off

    def _meta_start(self, bits: int) -> int:
        _, inline, _ = meta_plan(self.width, meta_bits=bits)
        return 0 if inline else self.hdr.size

    def meta(self, layout) -> int:
        return self.value >> self._meta_start(layout.size) & (1 << layout.size) - 1

    def get_meta(self, layout, name: str) -> int:
        f = layout[name]
        return self.meta(layout) >> f.offset & (1 << f.width) - 1

    def set_meta(self, layout, name: str, v: int) -> None:
        f = layout[name]
        off = self._meta_start(layout.size) + f.offset
        self.value = self.value & ~((1 << f.width) - 1 << off) | (v & (1 << f.width) - 1) << off

    def flits(self) -> list:
        """The message with its head as it is now."""
        w, nh, mask = self.width, self.nh, (1 << self.width) - 1
        head = [self.value >> (w * (nh - 1 - j)) & mask for j in range(nh)]
        head += [self.value >> (w * (nh + j)) & mask for j in range(self.need - nh)]
        words = head[:len(self.words)] + self.words[len(head):]
        return list(zip(words, self.lasts))


@dataclass
class Entry:
    valid: bool = False
    owner: bool = False
    gen: int = 0
    base: int = 0
    size: int = 0
    perm: int = 0
    mem: tuple = (0, 0)
    root: int = 0


@dataclass
class IpcRow:
    valid: bool = False
    any: bool = False
    x: int = 0
    y: int = 0
    fbits: int = 0

    def matches(self, x: int, y: int, fbits: int) -> bool:
        return self.valid and (self.x, self.y) == (x, y) and (self.any or self.fbits == fbits)


def _rows(caps, size):
    rows = [IpcRow(True, f is None, x, y, f or 0) for x, y, f in dict.fromkeys(caps)]
    return rows + [IpcRow() for _ in range(size - len(rows))]


@dataclass
class MonitorModel:
    width: int
    tile: tuple
    manager: tuple
    errors: tuple
    kernel: tuple
    ipc_out: list
    ipc_in: list
    entries: int = 8
    ipc_entries: int = 8
    in_entries: int = 8
    seg: list = field(default_factory=list)
    quarantined: bool = False
    counters: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.slot_bits = (self.entries - 1).bit_length()
        self.seg = [Entry() for _ in range(self.entries)]
        self.ipc_out = _rows(self.ipc_out, self.ipc_entries)
        self.ipc_in = _rows(self.ipc_in, self.in_entries)
        self.counters = dict.fromkeys(COUNTERS, 0)
        nh = header_flits(self.width)
        self.mem_need = nh + meta_plan(self.width, meta_bits=MEM_META.size)[0]
        self.kern_need = nh + meta_plan(self.width, meta_bits=KERNEL_META.size)[0]

    # -- helpers -----------------------------------------------------------------------------------

    def count(self, *names: str) -> None:
        for n in names:
            self.counters[n] += 1

    def kmsg(self, msg_type, dst, fbits=Fbits.LOCAL0, **meta) -> list:
        meta = {k: getattr(v, "value", v) for k, v in meta.items()}
        return kernel_message_flits(self.width, msg_type, KernelMeta(**meta), dst=dst[:2],
                                    src=self.tile, dst_fbits=fbits)

    def handle_of(self, slot: int) -> int:
        return (slot | self.seg[slot].gen << self.slot_bits) & (1 << HANDLE_BITS) - 1

    def lookup(self, handle: int) -> tuple:
        """``(slot, entry, current)`` of a handle."""
        slot = handle & (1 << self.slot_bits) - 1
        e = self.seg[slot]
        gen_bits = HANDLE_BITS - self.slot_bits
        return slot, e, e.valid and e.gen % (1 << gen_bits) == handle >> self.slot_bits

    def free_slot(self):
        return next((i for i, e in enumerate(self.seg) if not e.valid), None)

    def valid_handles(self) -> list:
        return [self.handle_of(i) for i, e in enumerate(self.seg) if e.valid]

    def drop(self, slot: int) -> None:
        e = self.seg[slot]
        e.valid = False
        e.gen = (e.gen + 1) % (1 << HANDLE_BITS)

    def is_kernel(self, x: int, y: int) -> bool:
        return (x, y) in self.kernel

    @staticmethod
    def ipc_match(table, x, y, fbits) -> bool:
        return any(r.matches(x, y, fbits) for r in table)

    # -- outgoing ----------------------------------------------------------------------------------

    def from_tile(self, flits: list, over_rate: bool = False) -> tuple[list, list]:
        """``over_rate``: the rate limit (not modelled) has too few tokens for this message, and
        faults."""
        noc, tile = [], []
        first = Head(self.width, flits[:1], 1)
        t = first.get("msg_type")
        need = (self.mem_need if t in MEM_REQUESTS else
                self.kern_need if t in TILE_OPS else header_flits(self.width))
        h = Head(self.width, flits, need)
        if self.quarantined:
            self.count("sunk_out")
            return noc, tile
        km = KernelMeta.unpack(h.meta(KERNEL_META))
        mm = {n: h.get_meta(MEM_META, n) for n in ("addr", "size", "wrap", "tag")}
        handle = mm["addr"] >> OFFSET_BITS & (1 << HANDLE_BITS) - 1
        offset = mm["addr"] & (1 << OFFSET_BITS) - 1
        want = Perm.READ if t == LOAD_MEM else Perm.WRITE
        fault = 0
        if h.short:
            fault = FaultKind.MALFORMED
        elif t in KERNEL_ONLY_TYPES:
            fault = FaultKind.FORGED
        elif t == K.CAP_SEND.value:
            _, e, current = self.lookup(km.handle)
            if not current:
                fault = FaultKind.STALE_HANDLE
            elif not (km.addr + km.size <= e.size and km.perm & ~e.perm == 0
                      and km.addr < 1 << OFFSET_BITS):
                fault = FaultKind.DERIVE_WIDER
            elif not self.ipc_match(self.ipc_out, km.peer_x, km.peer_y, km.peer_fbits):
                fault = FaultKind.NO_IPC_CAP
        elif t in MEM_REQUESTS:
            _, e, current = self.lookup(handle)
            if not current:
                fault = FaultKind.STALE_HANDLE
            elif e.perm & want != want:
                fault = FaultKind.PERMISSION
            elif not self.in_bounds(e, offset, mm["size"], mm["wrap"]):
                fault = FaultKind.OUT_OF_BOUNDS
        elif t not in TILE_OPS and not self.ipc_match(
                self.ipc_out, h.get("dst_x"), h.get("dst_y"), h.get("dst_fbits")):
            fault = FaultKind.NO_IPC_CAP
        if not fault and over_rate:
            fault = FaultKind.RATE

        if fault:
            self.quarantined = True
            self.count("faults", "sunk_out")
            detail = {}
            peer = (h.get("dst_x"), h.get("dst_y"), h.get("dst_fbits"))
            if not h.short and t in MEM_REQUESTS:
                detail = dict(handle=handle, addr=mm["addr"], size=mm["size"], perm=want)
            elif not h.short and t == K.CAP_SEND.value:
                detail = dict(handle=km.handle, addr=km.addr, size=km.size, perm=km.perm)
                peer = (km.peer_x, km.peer_y, km.peer_fbits)
            noc.append(self.kmsg(K.FAULT, self.errors, op=fault, peer_x=peer[0],
                                 peer_y=peer[1], peer_fbits=peer[2], user=t, **detail))
            return noc, tile

        if t in TILE_OPS:
            self.count("cap_ops")
            self.tile_op(t, km, noc, tile)
            return noc, tile

        self.count("passed_out")
        h.set("src_x", self.tile[0])
        h.set("src_y", self.tile[1])
        if t in MEM_REQUESTS:
            _, e, _ = self.lookup(handle)
            h.set("dst_x", e.mem[0])
            h.set("dst_y", e.mem[1])
            h.set("dst_fbits", Fbits.LOCAL0)
            h.set_meta(MEM_META, "addr", e.base + offset)
            h.set_meta(MEM_META, "tag", handle)
        noc.append(h.flits())
        return noc, tile

    @staticmethod
    def in_bounds(e: Entry, offset: int, size: int, wrap: int) -> bool:
        if wrap == 0:
            return offset + size <= e.size
        if wrap > OFFSET_BITS:
            return False
        ring = 1 << wrap
        return (offset & ~(ring - 1)) + ring <= e.size and e.base % ring == 0

    def tile_op(self, t: int, km: KernelMeta, noc: list, tile: list) -> None:
        result = dict(op=t, handle=km.handle, size=km.size, perm=km.perm, user=km.user)
        if t == K.CAP_ALLOC.value:
            if self.free_slot() is not None:
                noc.append(self.kmsg(K.MM_ALLOC, self.manager, size=km.size, perm=km.perm,
                                     user=km.user))
            else:
                tile.append(self.kmsg(K.CAP_RESULT, self.tile, status=Status.TABLE_FULL,
                                      **result))
        elif t == K.CAP_FREE.value:
            slot, e, current = self.lookup(km.handle)
            if current:
                tile.append(self.kmsg(K.CAP_RESULT, self.tile, status=Status.OK, **result))
                if e.owner:
                    noc.append(self.kmsg(K.MM_FREE, self.manager, root=e.root))
                self.drop(slot)
            else:
                tile.append(self.kmsg(K.CAP_RESULT, self.tile, status=Status.BAD_HANDLE,
                                      **result))
        else:
            _, e, _ = self.lookup(km.handle)
            noc.append(self.kmsg(K.MM_DERIVE, self.manager,
                                 addr=(e.base + km.addr) % (1 << 48), size=km.size,
                                 perm=km.perm, mem_x=e.mem[0], mem_y=e.mem[1], root=e.root,
                                 peer_x=km.peer_x, peer_y=km.peer_y, peer_fbits=km.peer_fbits,
                                 user=km.user))
            tile.append(self.kmsg(K.CAP_RESULT, self.tile, status=Status.OK, **result))

    # -- incoming ----------------------------------------------------------------------------------

    def from_noc(self, flits: list) -> tuple[list, list]:
        noc, tile = [], []
        first = Head(self.width, flits[:1], 1)
        t = first.get("msg_type")
        need = (self.mem_need if t in MEM_ACKS else
                self.kern_need if t in MONITOR_TYPES else header_flits(self.width))
        h = Head(self.width, flits, need)
        src = (h.get("src_x"), h.get("src_y"))
        kernel_src = self.is_kernel(*src)
        if t in MONITOR_TYPES and not h.short:
            if not kernel_src:
                self.count("kernel_denied")
                return noc, tile
            km = KernelMeta.unpack(h.meta(KERNEL_META))
            if t == K.CAP_INSTALL.value:
                self.install(km, noc, tile)
                if self.quarantined:
                    tile.clear()            # a quarantined tile hears nothing
            elif t == K.CAP_REVOKE.value:
                for i, e in enumerate(self.seg):
                    if e.valid and not e.owner and e.root == km.root:
                        self.drop(i)
                noc.append(self.kmsg(K.CAP_REVOKED, src, h.get("src_fbits"), root=km.root))
            elif t == K.IPC_GRANT.value:
                self.grant(km)
            else:
                noc.extend(self.release())
            return noc, tile
        if self.quarantined or h.short:
            self.count("sunk_in")
        elif kernel_src or self.ipc_match(self.ipc_in, *src, h.get("dst_fbits")):
            self.count("passed_in")
            if t in MEM_ACKS and kernel_src:
                tag = h.get_meta(MEM_META, "tag")
                base = self.seg[tag & (1 << self.slot_bits) - 1].base
                addr = h.get_meta(MEM_META, "addr")
                h.set_meta(MEM_META, "addr",
                           (addr - base) % (1 << OFFSET_BITS) | tag << OFFSET_BITS)
            tile.append(h.flits())
        else:
            self.count("sunk_in", "inbound_denied", "faults")
            noc.append(self.kmsg(K.FAULT, self.errors, op=FaultKind.INBOUND, peer_x=src[0],
                                 peer_y=src[1], peer_fbits=h.get("dst_fbits"), user=t | 1 << 8))
        return noc, tile

    def install(self, km: KernelMeta, noc: list, tile: list) -> None:
        is_alloc = km.op == K.CAP_ALLOC.value
        ok = km.status == Status.OK
        slot = self.free_slot()
        if ok and slot is not None:
            self.seg[slot] = Entry(True, is_alloc, self.seg[slot].gen, km.addr, km.size, km.perm,
                                   (km.mem_x, km.mem_y), km.root)
            handle = self.handle_of(slot)
            if is_alloc:
                tile.append(self.kmsg(K.CAP_RESULT, self.tile, op=K.CAP_ALLOC, status=Status.OK,
                                      handle=handle, size=km.size, perm=km.perm, user=km.user))
            else:
                tile.append(self.kmsg(K.CAP_NOTIFY, self.tile, handle=handle, size=km.size,
                                      perm=km.perm, peer_x=km.peer_x, peer_y=km.peer_y,
                                      user=km.user))
            return
        if ok:
            self.count("installs_dropped")
        if is_alloc:
            tile.append(self.kmsg(K.CAP_RESULT, self.tile, op=K.CAP_ALLOC,
                                  status=Status.TABLE_FULL if ok else km.status, user=km.user))
            if ok:
                noc.append(self.kmsg(K.MM_FREE, self.manager, root=km.root))

    def grant(self, km: KernelMeta) -> None:
        for table, direction in ((self.ipc_out, IpcDir.OUT), (self.ipc_in, IpcDir.IN)):
            if km.perm != direction:
                continue
            key = (km.peer_x, km.peer_y, km.peer_fbits)
            if km.status == 1:
                if any(r.valid and not r.any and (r.x, r.y, r.fbits) == key for r in table):
                    continue
                free = next((r for r in table if not r.valid), None)
                if free is not None:
                    free.valid, free.any, free.x, free.y, free.fbits = True, False, *key
            else:
                for r in table:
                    if r.matches(*key):
                        r.valid = False

    def release(self) -> list:
        """A RELEASE: the tile's memory given back, its segments dropped; of a tile that had not
        faulted too (a kill)."""
        out = []
        for i, e in enumerate(self.seg):
            if e.valid and e.owner:
                out.append(self.kmsg(K.MM_FREE, self.manager, root=e.root))
            if e.valid:
                self.drop(i)
        self.quarantined = False
        return out
