"""Per-flow state of the TCP engine, split by writer, and the wires between its two tiles.

Beehive's TCP engine keeps each connection's state in two memories, one written only by the
receive tile and one written only by the transmit tile, each readable by the other over
dedicated wires (Beehive §V-D). So does this one:

* :data:`RX_STATE` (written by :class:`~beehive.proto.tcp.rx.TcpRxTile`): who the peer is,
  what has been received and committed to the receive buffer, what the peer acknowledged and
  advertised, the connection's state;
* :data:`TX_STATE` (written by :class:`~beehive.proto.tcp.tx.TcpTxTile`): what has been sent,
  what the application has written, congestion control, the retransmission timer's back-off.

Each tile reads the other's record of a flow through a read port (:class:`TcpWires`), one
cycle after asking, and never waits for it to be current. That staleness is harmless by
construction, not by luck: every field a tile reads of the other's record only ever moves
forward in sequence space (``snd_max``, ``rcv_nxt``, ``snd_una``, the window's right edge) or
changes on an event the reader itself is told about through an event queue (opening, closing);
a reader that sees an older value acts as if the event that moved it had happened a few cycles
later, which TCP allows (a segment sent just before an ACK arrived, an ACK validated against a
``snd_max`` that has grown since). Record generations (``gen``) keep a reused slot's new
connection apart from the old one's late events.

Events that change the other side's state go through two queues in :class:`TcpWires`,
:data:`RX_EVENT` (receive → transmit: open, ACK now, new ACK, duplicate ACKs, arm the linger
timer, closed, send a reset) and :data:`TX_EVENT` (transmit → receive: FIN sent, a timer
expired, give up). Neither tile ever waits on the other to take an event while holding its own
event queue full, so the two cannot deadlock: the transmit tile handles receive events
without producing transmit events, and the receive tile handles transmit events without
producing receive events.
"""

from amaranth.hdl import unsigned
from amaranth.lib import data, enum, stream
from amaranth.lib.wiring import In, Out

from apiary.tile import WiresSignature

from .header import SACK_BLOCK


__all__ = ["ConnState", "TimerKind", "RX_STATE", "TX_STATE", "TIMER", "RX_EVENT", "TX_EVENT",
           "TcpWires", "slot_bits"]


class ConnState(enum.Enum, shape=3):
    """The connection state the receive tile keeps (the synchronised states of RFC 9293 are
    ``ESTABLISHED`` plus the FIN flags of both records)."""
    FREE = 0            # the slot holds no connection
    SYN_SENT = 1        # we opened: our SYN is out, waiting for the SYN-ACK
    SYN_RCVD = 2        # the peer opened: our SYN-ACK is out, waiting for its ACK (half-open)
    ESTABLISHED = 3     # synchronised (FIN_WAIT, CLOSE_WAIT, CLOSING, LAST_ACK by the flags)
    TIME_WAIT = 4       # both FINs done, we closed first: waiting out the linger timer
    ABORTED = 5         # reset or timed out: the application is still to be told


class TimerKind(enum.Enum, shape=2):
    RETRANSMIT = 0      # data, SYN or FIN outstanding
    PERSIST = 1         # data waiting behind a zero window: probe it
    LINGER = 2          # TIME-WAIT, or FIN-WAIT-2 waiting for the peer's FIN


def slot_bits(flows: int) -> int:
    return max(1, (flows - 1).bit_length())


_TUPLE = {"peer_ip": 32, "peer_port": 16, "local_port": 16, "peer_mac": 48, "vlan": 1,
          "vlan_tci": 16}
_APP = {"app_x": 8, "app_y": 8, "app_fbits": 4}

#: What the receive tile writes, per flow.
RX_STATE = data.StructLayout({
    "state": ConnState, "gen": 4,
    "announced": 2,         # notifications sent: 0, 1 (receive buffer), 2 (both buffers)
    "status": 4,            # ABORTED: what to tell the application (app.Status)
    "half_open": 1,         # counted among the half-open connections
    "active": 1,            # we opened it
    **_TUPLE, **_APP,
    "iss": 32, "irs": 32,
    "rcv_nxt": 32,          # committed: in the receive buffer, and acknowledged
    "rcv_stored": 32,       # accepted in order, its store possibly not acknowledged yet
    "rx_head": 32,          # read by the application up to here (sequence space)
    # The out-of-order ranges received (the reorder buffer: the ring itself): A, and B after
    # it with a gap (B only beside A); which one the latest such segment went to (0: A)
    "ooo_valid": 1, "ooo_start": 32, "ooo_end": 32,
    "ooo2_valid": 1, "ooo2_start": 32, "ooo2_end": 32, "ooo_report": 1,
    "fin_rcvd": 1,          # the peer's FIN is committed (rcv_nxt counts it)
    "snd_una": 32, "snd_wnd": 32,    # the peer's cumulative ACK and window (scaled)
    "peer_mss": 16, "peer_ws": 4, "ws_ok": 1, "last_win": 16, "dupacks": 3,
    "sack_ok": 1,           # both offered SACK-permitted: ACKs report an out-of-order range
    # The first range the peer's latest ACK reported holding beyond it (a SACK block; with
    # sack_ok only): the transmit tile does not send those bytes again; the end of the last
    # range (news in the next ACK make it a duplicate); the bytes all its ranges hold beyond it
    # (RFC 6675's SACKed bytes, for the pipe)
    "peer_sack_valid": 1, "peer_sack": SACK_BLOCK, "peer_sack_high": 32, "peer_sacked": 32,
    "our_fin": 1, "our_fin_seq": 32, "fin_acked": 1, "closed_first": 1,
    "rx_req": 1, "rx_req_len": 32,  # the application waits for this many bytes
    "peer_req": 1,          # the application asked who the peer is (TCP_PEER_REQ)
    "bufs": 1, "rx_h": 8, "tx_h": 8,   # under Apiary: the slot's ring segments (handles)
    "place": 4,             # where the flow table holds the flow (flow_table.place_bits)
})

#: What the transmit tile writes, per flow.
TX_STATE = data.StructLayout({
    "gen": 4, "active": 1, "iss": 32,
    "snd_nxt": 32,          # next sequence number to send
    "snd_max": 32,          # highest sequence number sent, plus one
    "snd_una": 32,          # this tile's copy of the cumulative ACK (from ACK events)
    "tail": 32,             # the application has written up to here (sequence space)
    "cwnd": 32, "ssthresh": 32, "recover": 32, "in_recovery": 1, "ca_acc": 32,
    # Retransmitted up to here (RFC 6675's HighRxt; at least ``snd_una``, which each ACK sets
    # it to but one that leaves it behind in SACK recovery): a fast retransmission goes on from
    # here, not from ``snd_una`` again
    "rtx_high": 32,
    "backoff": 4, "retries": 4,
    # RFC 6298: one segment timed at a time (not a retransmitted one: Karn), ending at
    # ``rtt_seq``, sent at tick ``rtt_at`` (the estimate: beehive.proto.tcp.rtt)
    "rtt_timing": 1, "rtt_seq": 32, "rtt_at": 32,
    "ack_pending": 1, "rtx_pending": 1, "probe_pending": 1,
    "fin_req": 1, "fin_announced": 1,
    "tx_req": 1, "tx_req_len": 32,
    **_APP,
})

#: The transmit tile's timer of each flow (a memory of its own, which a scanner walks).
TIMER = data.StructLayout({"armed": 1, "kind": TimerKind, "deadline": 32})

#: Receive → transmit: what happened to a flow that the transmit side must act on.
RX_EVENT = data.StructLayout({
    "slot": 12, "gen": 4,
    "open": 1,              # a connection starts: ``seq`` is the ISS, app_* its application
    "active": 1,            # ... and we opened it (send SYN, not SYN-ACK)
    "ack_now": 1,           # send an ACK
    "acked": 1,             # new cumulative ACK ``ack``
    "dupacks": 3,           # the count of duplicate ACKs so far (0: this was none)
    "wake": 1,              # the peer's window opened: the flow may send again
    "linger": 1,            # arm the linger timer (TIME-WAIT, or FIN-WAIT-2)
    "closed": 1,            # the slot is free: stop its timer
    "rst": 1,               # send a reset for the tuple below (no flow): seq, ack, rst_flags
    "seq": 32, "ack": 32, "rst_flags": 8,
    **_TUPLE, **_APP,
})

#: Transmit → receive.
TX_EVENT = data.StructLayout({
    "slot": 12, "gen": 4,
    "fin_sent": 1,          # our FIN went out, with sequence number ``seq``
    "expire": 1,            # the linger timer ran out: free the slot
    "abort": 1,             # retransmissions exhausted: drop the connection
    "seq": 32,
})


class TcpWires(WiresSignature):
    """The dedicated wires between the TCP receive tile (``Out``) and transmit tile (``In``):
    the two event queues, a read port into each tile's state memory, and where the transmit
    tile's send buffers are (for the receive tile's notifications) and the transmit tile itself
    (under Apiary, the receive tile sends it each connection's send ring)."""

    def __init__(self, flows: int) -> None:
        bits = slot_bits(flows)
        super().__init__({
            "rx_event": Out(stream.Signature(RX_EVENT)),
            "tx_event": In(stream.Signature(TX_EVENT)),
            "rx_read_addr": In(unsigned(bits)),
            "rx_read_data": Out(RX_STATE),
            "tx_read_addr": Out(unsigned(bits)),
            "tx_read_data": In(TX_STATE),
            "tx_mem_x": In(8), "tx_mem_y": In(8),     # where the send buffers are
            "tx_x": In(8), "tx_y": In(8),             # where the transmit tile is
        })
