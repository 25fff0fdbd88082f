"""The memory manager tile, driven through its NoC ports with kernel messages at 64 and 512 bits
and checked against a Python model built on BuddyModel: allocation until NO_MEMORY, free and
reallocation, two memories in order, BAD_SIZE, derivation and revocation (the block is freed
only after the last CAP_REVOKED), refused frees and derives, a full holder table, dropped
messages, a random mix of everything, and the allocation latency."""

import random
from collections import Counter

import pytest

from apiary.noc.framing import meta_message_flits
from apiary.noc.header import Fbits, NocHeader
from apiary.noc.testbench import recv_flits, send_flits
from apiary.os.buddy import BuddyModel
from apiary.os.memory_manager import MemoryManagerTile, make_root, split_root
from apiary.os.uapi import (KERNEL_META, KernelMeta, KernelMsgType, Perm, Status,
                            decode_kernel_message, kernel_message_flits)
from apiary.stream.testbench import simulate, transfers
from apiary.tile import TileEnv


MM_XY = (2, 2)
A = (0, 1, Fbits.LOCAL0)            # monitors: (x, y, fbits)
B = (3, 1, Fbits.LOCAL0)
C = (1, 3, Fbits.LOCAL1)
K = KernelMsgType
COUNTERS = ("allocs", "alloc_failed", "frees", "bad_free", "derives", "holders_full",
            "bad_derive", "revokes", "stray_revoked", "malformed")


class ManagerModel:
    """What the manager answers to each message, in Python: ``step`` returns the messages it
    sends, ``[(dst, msg_type, KernelMeta)]``, and ``latency`` the cycles from the request's
    last flit to the first reply's first flit."""

    def __init__(self, memories, block_bytes=256, max_holders=16, placement="first"):
        self.memories = memories
        self.placement = placement
        self.next = 0                       # with placement "rotate": the memory to try first
        self.block_bytes = block_bytes
        self.buddies = [BuddyModel(1 << ((size // block_bytes).bit_length() - 1))
                        for _, _, size in memories]
        self.largest = max(b.leaves for b in self.buddies) * block_bytes
        self.holders = [None] * max_holders     # [root, x, y, fbits, revoke sent]
        self.counters = Counter()
        self.latency = None

    def live(self, root):
        mem, leaf = split_root(root)
        return (mem < len(self.buddies) and self.buddies[mem].level_of(leaf) is not None
                and not any(h and h[0] == root and h[4] for h in self.holders))

    def step(self, msg_type, meta, src):
        self.latency = None
        if msg_type == K.MM_ALLOC:
            return [self.alloc(meta, src)]
        if msg_type == K.MM_DERIVE:
            return self.derive(meta, src)
        if msg_type == K.MM_FREE:
            return self.free(meta.root)
        if msg_type == K.CAP_REVOKED:
            return self.revoked(meta.root, src)
        self.counters["malformed"] += 1
        return []

    def alloc(self, meta, src):
        self.latency = 2
        fail = KernelMeta(op=K.CAP_ALLOC.value, user=meta.user)
        if meta.size == 0 or meta.size > self.largest:
            self.counters["alloc_failed"] += 1
            return src, K.CAP_INSTALL, KernelMeta(**{**vars(fail), "status": Status.BAD_SIZE})
        blocks = -(-meta.size // self.block_bytes)
        level = (blocks - 1).bit_length()
        order = list(range(len(self.buddies)))
        if self.placement == "rotate":
            order = order[self.next:] + order[:self.next]
        for i in order:
            buddy = self.buddies[i]
            leaf = buddy.alloc(level)
            if leaf is not None:
                self.next = (i + 1) % len(self.buddies)
                self.latency = 4 + buddy.steps
                self.counters["allocs"] += 1
                x, y, _ = self.memories[i]
                return src, K.CAP_INSTALL, KernelMeta(
                    op=K.CAP_ALLOC.value, status=Status.OK, addr=leaf * self.block_bytes,
                    size=meta.size, perm=meta.perm or Perm.RW, mem_x=x, mem_y=y,
                    root=make_root(i, leaf), user=meta.user)
        self.counters["alloc_failed"] += 1
        return src, K.CAP_INSTALL, KernelMeta(**{**vars(fail), "status": Status.NO_MEMORY})

    def derive(self, meta, src):
        peer = (meta.peer_x, meta.peer_y, meta.peer_fbits)
        if not self.live(meta.root):
            self.counters["bad_derive"] += 1
            return []
        entry = [meta.root, *peer, False]
        if entry not in self.holders:
            if None not in self.holders:
                self.counters["holders_full"] += 1
                return []
            self.holders[self.holders.index(None)] = entry
        self.counters["derives"] += 1
        self.latency = 2
        return [(peer, K.CAP_INSTALL, KernelMeta(
            op=K.CAP_SEND.value, status=Status.OK, addr=meta.addr, size=meta.size,
            perm=meta.perm, mem_x=meta.mem_x, mem_y=meta.mem_y, root=meta.root,
            peer_x=src[0], peer_y=src[1], user=meta.user))]

    def free(self, root):
        if not self.live(root):
            self.counters["bad_free"] += 1
            return []
        self.counters["frees"] += 1
        out = []
        for h in self.holders:
            if h and h[0] == root:
                h[4] = True
                out.append((tuple(h[1:4]), K.CAP_REVOKE, KernelMeta(root=root)))
        self.counters["revokes"] += len(out)
        if out:
            self.latency = 2
        else:
            self.release(root)
        return out

    def revoked(self, root, src):
        for i, h in enumerate(self.holders):
            if h and h[0] == root and h[4] and tuple(h[1:3]) == tuple(src[:2]):
                self.holders[i] = None
                if not any(h and h[0] == root for h in self.holders):
                    self.release(root)
                return []
        self.counters["stray_revoked"] += 1
        return []

    def release(self, root):
        mem, leaf = split_root(root)
        assert self.buddies[mem].free(leaf, self.buddies[mem].level_of(leaf))


def msg(width, msg_type, src=A, **fields):
    """The flits of a kernel message from ``src`` to the manager."""
    return kernel_message_flits(width, msg_type, KernelMeta(**fields), dst=MM_XY, src=src[:2],
                                src_fbits=src[2])


def run(width, script, memories, **params):
    """Send each ``(msg_type, src, fields)`` of ``script`` (or with a fourth item, those
    flits instead: the model takes a ``msg_type`` of None as a message to drop) to a manager,
    take the replies the model expects, and compare them with the model's (destination, type,
    metadata, source).
    Returns the replies per message, the latency of each message's first reply (None when
    it has none), the counters and the model."""
    tile = MemoryManagerTile(TileEnv(name="mm", x=MM_XY[0], y=MM_XY[1], width=width),
                             memories, **params)
    model = ManagerModel(memories, **params)
    expected, marks = [], []
    for msg_type, src, fields, *_ in script:
        expected.append(model.step(msg_type, KernelMeta(**fields), src))
        marks.append(model.latency)
    log_in, log_out, got, counters = [], [], [], {}
    bounds = []                                     # (last flit in, first flit out or None)

    async def tb(ctx):
        n_in = n_out = 0
        for (msg_type, src, fields, *flits), replies in zip(script, expected):
            flits = flits[0] if flits else msg(width, msg_type, src, **fields)
            await send_flits(ctx, tile.noc_in, flits)
            n_in += len(flits)
            bounds.append((n_in - 1, n_out if replies else None))
            got.append([])
            for _ in replies:
                out = await recv_flits(ctx, tile.noc_out)
                n_out += len(out)
                got[-1].append(decode_kernel_message(out, width))
        ctx.set(tile.noc_out.ready, 1)
        for _ in range(30):
            await ctx.tick()
            assert not ctx.get(tile.noc_out.valid), "a message the model does not send"
        counters.update({name: ctx.get(getattr(tile.counters, name)) for name in COUNTERS})

    simulate(tile, tb, background=[transfers(tile.noc_in, log_in),
                                   transfers(tile.noc_out, log_out)],
             timeout=200 * len(script) + 200)
    latencies = [None if first is None else log_out[first] - log_in[last]
                 for last, first in bounds]
    for want, have in zip(expected, got):
        assert len(want) == len(have)
        for (dst, msg_type, meta), (hdr, meta_got) in zip(want, have):
            assert (hdr.dst_x, hdr.dst_y, hdr.dst_fbits) == tuple(dst)
            assert (hdr.src_x, hdr.src_y, hdr.src_fbits) == (*MM_XY, Fbits.LOCAL0)
            assert (hdr.msg_type, hdr.payload_bytes) == (msg_type.value, 0)
            assert meta_got == meta
    assert latencies == marks
    assert counters == {name: model.counters[name] for name in COUNTERS}
    return got, latencies, counters, model


def alloc(size, src=A, perm=0, user=None):
    user = (size * 31 + 7) & 0xFFFF_FFFF if user is None else user
    return K.MM_ALLOC, src, dict(size=size, perm=perm, user=user)


def free(root, src=A):
    return K.MM_FREE, src, dict(root=root)


def revoked(root, src):
    return K.CAP_REVOKED, src, dict(root=root)


def derive(cap, to, src=A, user=5):
    """An MM_DERIVE of the allocation ``cap`` (a KernelMeta from a CAP_INSTALL) to ``to``."""
    return K.MM_DERIVE, src, dict(addr=cap.addr + 16, size=max(cap.size - 16, 1),
                                  perm=Perm.READ,
                                  mem_x=cap.mem_x, mem_y=cap.mem_y, root=cap.root,
                                  peer_x=to[0], peer_y=to[1], peer_fbits=to[2], user=user)


WIDTHS = [64, 512]


# -- allocation ------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_allocate_until_no_memory_then_free_and_reallocate(width):
    """16 blocks of 256 bytes: sixteen 1-byte to 256-byte allocations get leaves 0 to 15 in
    order (addr, root, mem_x/y, size as asked, RW for perm 0), the seventeenth NO_MEMORY;
    freeing two buddies lets a 512-byte allocation succeed at the first of them."""
    memories = [(4, 0, 4096)]
    script = [alloc(1 + 17 * i, perm=Perm.READ if i == 3 else 0) for i in range(16)]
    script += [alloc(1), free(make_root(0, 6)), free(make_root(0, 7)), alloc(300), alloc(1)]
    got, latencies, counters, _ = run(width, script, memories)
    caps = [replies[0][1] for replies in got if replies]
    assert [c.addr for c in caps[:16]] == [256 * i for i in range(16)]
    assert caps[0] == KernelMeta(op=K.CAP_ALLOC.value, status=Status.OK, addr=0, size=1,
                                 perm=Perm.RW, mem_x=4, mem_y=0, root=0, user=38)
    assert caps[3].perm == Perm.READ
    assert caps[16] == KernelMeta(op=K.CAP_ALLOC.value, status=Status.NO_MEMORY, user=38)
    assert (caps[-2].status, caps[-2].addr, caps[-2].root) == (Status.OK, 6 * 256, 6)
    assert caps[-1].status == Status.NO_MEMORY
    assert latencies[0] == 4 + 4 and latencies[1] == 4      # the first splits 4 times
    assert counters["allocs"] == 17 and counters["frees"] == 2


@pytest.mark.parametrize("width", WIDTHS)
def test_two_memories_in_order_and_bad_sizes(width):
    """Memories of 4096 and 3000 bytes (16 and 8 leaves): 4096 bytes fill the first, the
    next allocations go to the second, then NO_MEMORY; 0 bytes and 4097 bytes (more than the
    largest memory) are BAD_SIZE whatever the room."""
    memories = [(4, 0, 4096), (5, 1, 3000)]
    script = [alloc(0), alloc(4097), alloc(4096), alloc(1024), alloc(1024), alloc(1),
              alloc(1 << 39), free(make_root(0, 0)), alloc(2048), alloc(1024)]
    got, _, _, _ = run(width, script, memories)
    caps = [replies[0][1] for replies in got if replies]
    assert [c.status for c in caps] == [Status.BAD_SIZE, Status.BAD_SIZE, Status.OK, Status.OK,
                                        Status.OK, Status.NO_MEMORY, Status.BAD_SIZE,
                                        Status.OK, Status.OK]
    assert [(c.mem_x, c.mem_y, c.addr) for c in caps[2:5]] == [(4, 0, 0), (5, 1, 0),
                                                               (5, 1, 1024)]
    assert caps[3].root == make_root(1, 0) and caps[4].root == make_root(1, 4)
    assert (caps[7].mem_x, caps[7].addr, caps[8].addr) == (4, 0, 2048)
    assert caps[0] == KernelMeta(op=K.CAP_ALLOC.value, status=Status.BAD_SIZE, user=7)


# -- derivation and revocation ---------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_free_revokes_every_holder_and_frees_only_after_the_last_ack(width):
    """A derives its 4096-byte block (the whole memory) to B, to C, and to B again (one
    entry). MM_FREE sends CAP_REVOKE to B and to C. Until both have answered CAP_REVOKED the
    block stays allocated: an allocation of it gets NO_MEMORY, a second free and a derive of
    the root are refused, an ack from a stranger is dropped; after C's ack the same
    allocation succeeds."""
    memories = [(4, 0, 4096)]
    root = 0
    cap = KernelMeta(addr=0, size=4096, mem_x=4, root=root)
    script = [alloc(4096), derive(cap, B), derive(cap, C, user=6), derive(cap, B),
              free(root), alloc(256), free(root), derive(cap, C), revoked(root, B),
              revoked(root, B), alloc(256), revoked(root, A), revoked(root, C), alloc(256)]
    got, latencies, counters, _ = run(width, script, memories)
    installs = [g[0] for g in got[1:4]]
    assert [(h.dst_x, h.dst_y, h.dst_fbits) for h, _ in installs] == [B, C, B]
    assert installs[1][1] == KernelMeta(op=K.CAP_SEND.value, status=Status.OK, addr=16,
                                        size=4080, perm=Perm.READ, mem_x=4, mem_y=0,
                                        root=root, peer_x=A[0], peer_y=A[1], user=6)
    revokes = got[4]
    assert [(h.msg_type, h.dst_x, h.dst_y, h.dst_fbits, m.root) for h, m in revokes] == [
        (K.CAP_REVOKE.value, *B, root), (K.CAP_REVOKE.value, *C, root)]
    assert got[5][0][1].status == Status.NO_MEMORY          # revocation under way
    assert got[6] == got[7] == []                           # refused free, refused derive
    assert got[10][0][1].status == Status.NO_MEMORY         # B acked, C not yet
    assert got[13][0][1].status == Status.OK and got[13][0][1].root == root
    assert counters["revokes"] == 2 and counters["bad_free"] == 1
    assert counters["bad_derive"] == 1 and counters["stray_revoked"] == 2
    assert latencies[4] == 2 and latencies[1] == 2


@pytest.mark.parametrize("width", WIDTHS)
def test_full_holder_table_drops_the_derive(width):
    """max_holders=2: a third receiver's derive is dropped (no install, holders_full); once
    the root is freed and acked the entries are free again."""
    memories = [(4, 0, 4096)]
    cap0 = KernelMeta(size=256, mem_x=4, root=make_root(0, 0))
    cap1 = KernelMeta(size=256, mem_x=4, addr=256, root=make_root(0, 1))
    script = [alloc(256), alloc(256), derive(cap0, B), derive(cap1, C), derive(cap0, C),
              derive(cap0, B), free(cap0.root), revoked(cap0.root, B), derive(cap1, B),
              free(cap1.root), revoked(cap1.root, C), revoked(cap1.root, B), alloc(512)]
    got, _, counters, _ = run(width, script, memories, max_holders=2)
    assert got[4] == [] and len(got[5]) == 1                # C's dropped, B's again served
    assert counters["holders_full"] == 1 and counters["derives"] == 4
    assert got[-1][0][1].status == Status.OK and got[-1][0][1].addr == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_bad_frees_and_dropped_messages(width):
    """Frees of roots never allocated, of a memory that does not exist, of a leaf inside a
    block, and twice; messages of other types and one with a payload: each counted, none
    answered, and the requests after them served."""
    memories = [(4, 0, 4096)]
    with_payload = meta_message_flits(     # an MM_ALLOC with a payload
        width, NocHeader(dst_x=MM_XY[0], dst_y=MM_XY[1], msg_type=K.MM_ALLOC.value,
                         src_x=A[0], src_y=A[1]),
        KernelMeta(size=256).pack(), KERNEL_META.size, b"extra bytes")
    script = [alloc(512), free(make_root(0, 4)), free(make_root(3, 0)), free(make_root(0, 1)),
              free(make_root(0, 0)), free(make_root(0, 0)), (K.CAP_ALLOC, A, dict(size=1)),
              (K.FAULT, A, dict()), (None, A, dict(), with_payload), alloc(256)]
    got, _, counters, _ = run(width, script, memories)
    assert [len(g) for g in got] == [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert got[-1][0][1].status == Status.OK and got[-1][0][1].addr == 0
    assert counters["bad_free"] == 4 and counters["frees"] == 1
    assert counters["malformed"] == 3


@pytest.mark.parametrize("width", WIDTHS)
def test_rotating_placement_spreads_allocations_over_the_memories(width):
    """With placement "rotate", allocations take turns among the memories with room (a full
    one is passed over), so a run of buffers is spread over their bandwidth."""
    memories = [(4, 0, 2048), (5, 1, 4096), (6, 2, 2048)]
    script = [alloc(1024) for _ in range(9)] + [alloc(256)]
    got, _, _, _ = run(width, script, memories, placement="rotate")
    caps = [replies[0][1] for replies in got]
    assert [c.mem_x for c in caps[:3]] == [4, 5, 6]
    assert [split_root(c.root)[0] for c in caps[:6]] == [0, 1, 2, 0, 1, 2]
    # Memories 0 and 2 are full after two each: the rest go to memory 1, then nothing fits.
    assert [split_root(c.root)[0] for c in caps[6:8]] == [1, 1]
    assert [c.status for c in caps[8:]] == [Status.NO_MEMORY, Status.NO_MEMORY]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("placement", ["first", "rotate"])
def test_random_mix_matches_the_model(width, placement):
    """150 random messages (allocations of any size, frees good and bad, derives to three
    receivers, acks in any order and some stray ones) to two memories with a small holder
    table: every reply, latency and counter as the model says."""
    rng = random.Random(width)
    memories = [(4, 0, 4096), (5, 1, 2048)]
    peers = [A, B, C]
    model = ManagerModel(memories, max_holders=4, placement=placement)
    script, caps, outstanding = [], [], []
    for _ in range(150):
        r = rng.random()
        src = rng.choice(peers)
        if r < 0.35 or not caps:
            step = alloc(rng.choice([0, 1, 200, 256, 257, 700, 1024, 2048, 4096, 5000,
                                     rng.randrange(1, 4097)]), src, perm=rng.randrange(4),
                         user=rng.getrandbits(32))
        elif r < 0.55:
            cap = rng.choice(caps)
            step = derive(cap, rng.choice(peers), src, user=rng.getrandbits(32))
        elif r < 0.75:
            root = rng.choice([c.root for c in caps] + [rng.getrandbits(16)])
            step = free(root, src)
        elif outstanding and r < 0.95:
            root, peer = outstanding.pop(rng.randrange(len(outstanding)))
            step = revoked(root, peer)
        else:
            step = revoked(rng.choice([c.root for c in caps]), src)
        script.append(step)
        for dst, msg_type, meta in model.step(step[0], KernelMeta(**step[2]), step[1]):
            if msg_type == K.CAP_INSTALL and meta.status == Status.OK and meta.op == 32:
                caps.append(meta)
            if msg_type == K.CAP_REVOKE:
                outstanding.append((meta.root, dst))
    _, latencies, counters, _ = run(width, script, memories, max_holders=4,
                                    placement=placement)
    assert counters["allocs"] > 10 and counters["revokes"] >= 5 and counters["derives"] > 10
    assert counters["bad_free"] and counters["alloc_failed"] and counters["holders_full"]
    assert max(lat for lat in latencies if lat is not None) <= 50


# -- latency ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_allocation_latency(width):
    """From MM_ALLOC's last flit in to CAP_INSTALL's first flit out: 4 cycles + 1 per split,
    so 4 + log2(leaves) for the first allocation of a 256-leaf memory (12), 4 when a block of
    the size is free, 5 with one split, 2 for BAD_SIZE (and NO_MEMORY); the target is 50 or
    less."""
    memories = [(4, 0, 65536)]
    script = [alloc(256), alloc(256), alloc(256), alloc(1024), alloc(0), alloc(65536)]
    got, latencies, _, _ = run(width, script, memories)
    assert latencies == [12, 4, 5, 4, 2, 2]
    assert max(latencies) <= 50


@pytest.mark.parametrize("width", WIDTHS)
def test_worst_case_allocation_latency_with_4096_leaves(width):
    """The largest allocator a root can name (1 MiB of 256-byte blocks, 4096 leaves): the
    first allocation splits 12 times, 16 cycles."""
    _, latencies, _, _ = run(width, [alloc(256), alloc(256)], [(4, 0, 1 << 20)])
    assert latencies == [16, 4]


def test_the_constructor_checks_its_parameters():
    env = TileEnv(width=64)
    cases = [
        (dict(memories=[]), "1 to 16 memories"),
        (dict(memories=[(0, 0, 4096)] * 17), "1 to 16 memories"),
        (dict(memories=[(0, 0)]), "must be \\(x, y, size_bytes\\)"),
        (dict(memories=[(256, 0, 4096)]), "outside"),
        (dict(memories=[(0, 0, 100)]), "at least one block"),
        (dict(memories=[(0, 0, 1 << 21)]), "at least 512 bytes"),
        (dict(memories=[(0, 0, 4096)], block_bytes=100), "power of two"),
        (dict(memories=[(0, 0, 4096)], max_holders=0), "max_holders"),
    ]
    for params, message in cases:
        with pytest.raises(ValueError, match=message):
            MemoryManagerTile(env, **params)
    tile = MemoryManagerTile(env, [(0, 0, 3000), (1, 0, 1 << 20)], block_bytes=512)
    assert tile.leaves == [4, 2048] and tile.largest_bytes == 1 << 20
