"""NoC messages as frames on an Ethernet port: drive and watch any NoC traffic from a frame-level
testbench, on either simulation back end."""

from amaranth import Module
from amaranth.lib.wiring import In, Out, connect, flipped

from ..stream.mac import FrameStream
from ..stream.packet_buffer import PacketBuffer
from ..tile import Receive, Send, Tile
from ..stream.counters import count


__all__ = ["RawPortTile", "message_frame", "frame_message"]


def message_frame(flits: list, width: int) -> bytes:
    """The frame that carries a message: its flits' data, ``width // 8`` bytes each, least
    significant byte first."""
    return b"".join(int(f[0] if isinstance(f, tuple) else f).to_bytes(width // 8, "little")
                    for f in flits)


def frame_message(frame: bytes, width: int) -> list[tuple[int, int]]:
    """The flits (``(data, last)``) a frame carries."""
    nb = width // 8
    words = [int.from_bytes(frame[i:i + nb], "little") for i in range(0, len(frame), nb)]
    return [(w, int(i == len(words) - 1)) for i, w in enumerate(words)]


class RawPortTile(Tile):
    """Each frame received on ``mac_rx`` is one whole NoC message, sent as it is (the sender
    writes the whole header: :func:`message_frame`); each message delivered to the tile leaves
    on ``mac_tx`` as one frame (:func:`frame_message`). For tests: a design's NoC traffic seen
    through the frame ports every simulator drives.

    Receive is store-and-forward through a :class:`~apiary.stream.packet_buffer.PacketBuffer`
    of ``buffer_bytes`` and ``max_queued`` frames (a frame that does not fit is dropped and
    counted in ``rx_dropped``, as a MAC would; with ``backpressure=True`` it waits on the port
    instead, as an application would; a frame that is not whole flits ends with a zero-padded
    one); transmit is combinational. The two directions are independent.

    Message ports: ``to_mac`` in (to ``mac_tx``) and ``from_mac`` out (from ``mac_rx``), any
    type, as flits (``raw``).
    """

    streaming = False
    inputs = (Receive("to_mac", raw=True),)
    outputs = (Send("from_mac", raw=True),)

    def __init__(self, env=None, *, buffer_bytes: int = 8192, max_frame: int = 4096,
                 max_queued: int = 16, backpressure: bool = False) -> None:
        width = env.width if env is not None else 512
        super().__init__(env, {
            "mac_rx": In(FrameStream(width)),
            "mac_tx": Out(FrameStream(width)),
        }, counters={
            "rx_messages": "frames sent into the NoC as messages",
            "rx_dropped": "frames dropped: no room, too long, or not whole flits",
            "tx_messages": "messages sent out as frames",
        })
        self.buffer_bytes = buffer_bytes
        self.max_frame = max_frame
        self.max_queued = max_queued
        self.backpressure = bool(backpressure)

    def elaborate(self, platform):
        m = Module()
        width, nb = self.env.width, self.env.width // 8
        ports = self.message_ports(m)
        noc_in, noc_out = ports.to_mac, ports.from_mac
        m.submodules.buffer = buf = PacketBuffer(
            width, max_bytes=self.max_frame, buffer_bytes=self.buffer_bytes, min_bytes=nb,
            max_queued=self.max_queued, verdict=False, always_ready=not self.backpressure)
        connect(m, tile=flipped(self.mac_rx), buffer=buf.i)
        m.d.comb += [
            buf.o_desc.ready.eq(1),
            noc_out.valid.eq(buf.o.valid),
            noc_out.payload.data.eq(buf.o.payload.data),
            noc_out.payload.last.eq(buf.o.payload.last),
            buf.o.ready.eq(noc_out.ready),
            self.counters.rx_messages.eq(buf.packets),
            self.counters.rx_dropped.eq(buf.overflow),
        ]
        tx = self.mac_tx
        m.d.comb += [
            tx.valid.eq(noc_in.valid),
            tx.payload.data.eq(noc_in.payload.data),
            tx.payload.nbytes.eq(nb),
            tx.payload.last.eq(noc_in.payload.last),
            noc_in.ready.eq(tx.ready),
        ]
        with m.If(tx.valid & tx.ready & tx.payload.last):
            count(m, self.counters.tx_messages)
        return m
