"""ErrorManagerTile (apiary/os/error_manager.py) alone, at 64 and 512 bits, through its NoC ports:
faults logged and read back in order with their faulting tile and a running total, NO_ENTRY
past the end, a full log that keeps counting, RELEASE forwarded to the tile it names, and
malformed or foreign messages dropped and counted while the next good one is served."""

import random

import pytest

from apiary.noc.framing import meta_message_flits
from apiary.noc.header import Fbits, Message, NocHeader
from apiary.noc.testbench import recv_flits, send_flits
from apiary.os.error_manager import LOG_ENTRY, ErrorManagerTile
from apiary.os.uapi import (KERNEL_META, FaultKind, KernelMeta, KernelMsgType, Status,
                            decode_kernel_message, kernel_message_flits)
from apiary.stream.testbench import simulate, transfers
from apiary.tile import TileEnv


MGR = (2, 1)
ASKER = (3, 0)
COUNTERS = ("faults", "dropped_log", "reads", "releases", "malformed")


def fault_meta(rng: random.Random) -> KernelMeta:
    """A FAULT's meta with random values in every field a FAULT uses (and junk in ``root`` and
    ``status``, which the log does not keep)."""
    return KernelMeta(op=rng.choice(list(FaultKind)), handle=rng.getrandbits(8),
                      addr=rng.getrandbits(48), size=rng.getrandbits(40), perm=rng.getrandbits(2),
                      peer_x=rng.getrandbits(8), peer_y=rng.getrandbits(8),
                      peer_fbits=rng.getrandbits(4), user=rng.getrandbits(9),
                      root=rng.getrandbits(16), mem_x=rng.getrandbits(8))


def fault(width, tile, meta):
    return kernel_message_flits(width, KernelMsgType.FAULT.value, meta, dst=MGR, src=tile)


def read(width, index, asker=ASKER, fbits=Fbits.LOCAL1):
    return kernel_message_flits(width, KernelMsgType.FAULT_READ.value, KernelMeta(handle=index),
                                dst=MGR, src=asker, src_fbits=fbits)


def release(width, x, y, fbits=Fbits.LOCAL0, **extra):
    return kernel_message_flits(width, KernelMsgType.RELEASE.value,
                                KernelMeta(peer_x=x, peer_y=y, peer_fbits=fbits, **extra),
                                dst=MGR, src=ASKER)


def entry_of(tile, meta: KernelMeta, total: int) -> KernelMeta:
    """The FAULT_ENTRY meta the log must give back for a FAULT from ``tile``."""
    return KernelMeta(op=meta.op, handle=meta.handle, addr=meta.addr, size=meta.size,
                      perm=meta.perm, peer_x=meta.peer_x, peer_y=meta.peer_y,
                      peer_fbits=meta.peer_fbits, user=meta.user, mem_x=tile[0], mem_y=tile[1],
                      root=total, status=Status.OK)


def run(width, messages, replies, *, log_depth=64, stall=0.0, seed=0, timeout=20_000):
    """Send ``messages`` (lists of flits) into the tile; return the ``replies`` messages it
    sends (decoded) and its counters once it has been idle for a while."""
    dut = ErrorManagerTile(TileEnv(name="errors", x=MGR[0], y=MGR[1], width=width),
                           log_depth=log_depth)
    rng = random.Random(seed)
    in_stall = dict(rng=random.Random(rng.random()), stall=stall) if stall else {}
    out_stall = dict(rng=random.Random(rng.random()), stall=stall) if stall else {}
    got, counters = [], {}

    async def source(ctx):
        for flits in messages:
            await send_flits(ctx, dut.noc_in, flits, **in_stall)

    async def sink(ctx):
        for _ in range(replies):
            got.append(decode_kernel_message(await recv_flits(ctx, dut.noc_out, **out_stall),
                                             width))
        ctx.set(dut.noc_out.ready, 1)
        await ctx.tick().repeat(40)
        assert ctx.get(dut.noc_out.valid) == 0, "a message nobody asked for"
        assert ctx.get(dut.noc_in.ready) == 1, "the input is not free"
        for name in COUNTERS:
            counters[name] = ctx.get(getattr(dut.counters, name))

    simulate(dut, sink, background=[source], timeout=timeout)
    return got, counters


def check_entry(width, got, expected_meta):
    header, meta = got
    assert header.msg_type == KernelMsgType.FAULT_ENTRY.value
    assert (header.dst_x, header.dst_y, header.dst_fbits) == (*ASKER, Fbits.LOCAL1)
    assert (header.src_x, header.src_y, header.src_fbits) == (*MGR, Fbits.LOCAL0)
    assert header.payload_bytes == 0
    assert meta == expected_meta


@pytest.mark.parametrize("width", [64, 512])
def test_faults_are_logged_and_read_back_in_order(width):
    """Faults from several tiles, then a read of every entry (in a shuffled order, back to back
    with random stalls on both sides) and two past the end: each entry is the fault's meta with
    the faulting tile in mem_x/y and the total so far in root; past the end, NO_ENTRY and only
    root."""
    rng = random.Random(width)
    faults = [((rng.randrange(4), rng.randrange(4)), fault_meta(rng)) for _ in range(10)]
    order = list(range(len(faults)))
    rng.shuffle(order)
    messages = [fault(width, tile, meta) for tile, meta in faults]
    messages += [read(width, i) for i in order] + [read(width, 10), read(width, 63)]
    got, counters = run(width, messages, len(order) + 2, stall=0.3, seed=width)
    for g, i in zip(got, order):
        tile, meta = faults[i]
        check_entry(width, g, entry_of(tile, meta, len(faults)))
    for g in got[-2:]:
        check_entry(width, g, KernelMeta(root=10, status=Status.NO_ENTRY))
    assert counters == {"faults": 10, "dropped_log": 0, "reads": 12, "releases": 0,
                        "malformed": 0}


@pytest.mark.parametrize("width", [64, 512])
def test_reads_interleaved_with_faults_see_the_total_so_far(width):
    """A read between faults sees the faults received before it (root) and NO_ENTRY for the
    entry not yet written; an index beyond the log's depth (whose low bits name a stored
    entry) is past the end too."""
    rng = random.Random(3)
    a, b = fault_meta(rng), fault_meta(rng)
    messages = [read(width, 0), fault(width, (1, 2), a), read(width, 1), read(width, 0),
                fault(width, (0, 3), b), read(width, 1), read(width, 4 + 1)]
    got, counters = run(width, messages, 5, log_depth=4)
    check_entry(width, got[0], KernelMeta(root=0, status=Status.NO_ENTRY))
    check_entry(width, got[1], KernelMeta(root=1, status=Status.NO_ENTRY))
    check_entry(width, got[2], entry_of((1, 2), a, 1))
    check_entry(width, got[3], entry_of((0, 3), b, 2))
    check_entry(width, got[4], KernelMeta(root=2, status=Status.NO_ENTRY))
    assert counters["reads"] == 5 and counters["faults"] == 2


@pytest.mark.parametrize("width", [64, 512])
def test_a_full_log_keeps_counting_but_stops_storing(width):
    """With a 4-entry log, 7 faults: the first 4 are stored and kept (not overwritten), the
    other 3 counted in dropped_log and in root; index 4 is past the end."""
    rng = random.Random(7)
    faults = [((k, k + 1), fault_meta(rng)) for k in range(7)]
    messages = [fault(width, t, m) for t, m in faults] + [read(width, k) for k in range(5)]
    got, counters = run(width, messages, 5, log_depth=4)
    for k in range(4):
        check_entry(width, got[k], entry_of(*faults[k], 7))
    check_entry(width, got[4], KernelMeta(root=7, status=Status.NO_ENTRY))
    assert counters == {"faults": 7, "dropped_log": 3, "reads": 5, "releases": 0,
                        "malformed": 0}


@pytest.mark.parametrize("width", [64, 512])
def test_release_is_forwarded_to_the_tiles_monitor(width):
    """RELEASE naming tile (x, y, fbits) leaves for exactly that destination with the request's
    meta unchanged and the manager as its source; nothing goes back to the sender."""
    messages = [release(width, 3, 2), release(width, 0, 1, Fbits.LOCAL2, user=0xABCD),
                read(width, 0)]
    got, counters = run(width, messages, 3, stall=0.3, seed=1)
    for (header, meta), (x, y, fbits, user) in zip(got, [(3, 2, Fbits.LOCAL0, 0),
                                                         (0, 1, Fbits.LOCAL2, 0xABCD)]):
        assert header.msg_type == KernelMsgType.RELEASE.value
        assert (header.dst_x, header.dst_y, header.dst_fbits) == (x, y, fbits)
        assert (header.src_x, header.src_y, header.src_fbits) == (*MGR, Fbits.LOCAL0)
        assert meta == KernelMeta(peer_x=x, peer_y=y, peer_fbits=fbits, user=user)
    check_entry(width, got[2], KernelMeta(root=0, status=Status.NO_ENTRY))
    assert counters["releases"] == 2 and counters["reads"] == 1


@pytest.mark.parametrize("width", [64, 512])
def test_malformed_and_foreign_messages_are_dropped_and_the_next_is_served(width):
    """A message with the wrong number of metadata flits, one cut short inside its metadata
    (64 bits: at 512 it is a single flit), kernel messages the manager does not take and a
    FAULT with a payload (logged, payload discarded): the bad ones are counted in malformed,
    and the fault and read after them are served."""
    rng = random.Random(11)
    good = fault_meta(rng)
    wrong_meta = Message(NocHeader(dst_x=MGR[0], dst_y=MGR[1], dst_fbits=Fbits.LOCAL0,
                                   msg_type=KernelMsgType.FAULT.value, src_x=1, src_y=1),
                         [0] * (2 if width == 64 else 1), b"").flits(width)
    messages = [wrong_meta]
    bad = 1
    if width == 64:
        cut = fault(width, (1, 1), fault_meta(rng))[:3]
        messages.append(cut[:-1] + [(cut[-1][0], 1)])
        bad += 1
    for msg_type in (KernelMsgType.IPC_GRANT.value, KernelMsgType.FAULT_ENTRY.value,
                     KernelMsgType.CAP_ALLOC.value):
        messages.append(kernel_message_flits(width, msg_type, fault_meta(rng), dst=MGR, src=(1, 1)))
        bad += 1
    hdr = NocHeader(dst_x=MGR[0], dst_y=MGR[1], dst_fbits=Fbits.LOCAL0,
                    msg_type=KernelMsgType.FAULT.value, src_x=2, src_y=3)
    messages.append(meta_message_flits(width, hdr, good.pack(), KERNEL_META.size,
                                       bytes(range(100))))
    messages.append(read(width, 0))
    got, counters = run(width, messages, 1)
    check_entry(width, got[0], entry_of((2, 3), good, 1))
    assert counters == {"faults": 1, "dropped_log": 0, "reads": 1, "releases": 0,
                        "malformed": bad}


def test_log_depth_is_checked_and_an_entry_fits_a_block_ram_word():
    for bad in (0, 257, 1.5, True, "64"):
        with pytest.raises(ValueError, match="log_depth"):
            ErrorManagerTile(TileEnv(), log_depth=bad)
    assert ErrorManagerTile(TileEnv(), log_depth=256).log_depth == 256
    assert LOG_ENTRY.size == 172


def test_a_256_entry_log_fills_and_reads_back_at_64_bits():
    """The deepest log: 260 faults, every entry read back, the last index and one past it."""
    rng = random.Random(256)
    faults = [((rng.randrange(8), rng.randrange(8)), fault_meta(rng)) for _ in range(260)]
    messages = [fault(64, t, m) for t, m in faults] + [read(64, k) for k in range(256)]
    got, counters = run(64, messages, 256, log_depth=256, timeout=100_000)
    for k in range(256):
        check_entry(64, got[k], entry_of(*faults[k], 260))
    assert counters["dropped_log"] == 4


@pytest.mark.parametrize("width", [64, 512])
def test_faults_are_taken_back_to_back_and_a_read_is_answered_at_once(width):
    """Faults back to back: the input never stalls (one flit per cycle); a read's reply starts
    in the cycle after the read's last flit, and a RELEASE's forward likewise; the input waits
    only while a reply leaves."""
    rng = random.Random(9)
    messages = [fault(width, (1, 1), fault_meta(rng)) for _ in range(6)]
    messages += [read(width, 2), release(width, 1, 1)]
    dut = ErrorManagerTile(TileEnv(name="errors", x=MGR[0], y=MGR[1], width=width))
    log_in, log_out = [], []

    async def tb(ctx):
        ctx.set(dut.noc_out.ready, 1)
        for flits in messages:
            await send_flits(ctx, dut.noc_in, flits)
        await ctx.tick().repeat(20)

    simulate(dut, tb, background=[transfers(dut.noc_in, log_in),
                                  transfers(dut.noc_out, log_out)])
    per = len(messages[0])
    fault_flits = 6 * per
    assert log_in[:fault_flits] == list(range(fault_flits))
    read_last = log_in[fault_flits + per - 1]
    assert log_out[0] == read_last + 1
    assert log_out[:per] == list(range(read_last + 1, read_last + 1 + per))
    release_last = log_in[-1]
    assert log_out[per] == release_last + 1
    assert len(log_out) == 2 * per
