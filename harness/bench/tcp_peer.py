"""A TCP endpoint in Python (scapy) that talks to a simulated design: the TCP tests and the
TCP benchmark drive the engine with it.

:class:`Peer` sends segments into a :class:`~apiary.sim.Sim` and reads the segments the design
sends back: it checks each one's IPv4 and TCP checksums, keeps what the design has sent (in
order, by sequence number, whatever the order it came in), and acknowledges it unless told
not to. The tests script everything else (lost segments, windows, resets) segment by segment.
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

if TYPE_CHECKING:
    from apiary.sim import Sim

DESIGN_MAC, DESIGN_IP = "02:00:00:00:00:02", "10.0.0.2"
PEER_MAC, PEER_IP = "52:54:00:12:34:56", "10.0.0.1"
MOD = 1 << 32


def seq_add(a, b):
    return (a + b) % MOD


def seq_diff(a, b):
    """``a - b`` in sequence space, as a signed number."""
    d = (a - b) % MOD
    return d - MOD if d >= 1 << 31 else d


def checksums_ok(frame):
    """Whether a frame's IPv4 header checksum and TCP checksum are right."""
    ip = Ether(frame)[IP]
    again = IP(bytes(ip))
    del again.chksum
    del again[TCP].chksum
    again = IP(bytes(again))
    return again.chksum == ip.chksum and again[TCP].chksum == ip[TCP].chksum


@dataclass
class Seen:
    """One segment the design sent: its TCP header as scapy parsed it, its payload, the cycle
    it left."""
    tcp: TCP
    data: bytes
    cycle: int

    @property
    def flags(self):
        return str(self.tcp.flags)


@dataclass
class Peer:
    """One connection's far end. ``sport`` is ours, ``dport`` the design's."""
    sim: "Sim"
    sport: int = 40000
    dport: int = 7
    isn: int = 1000
    mss: int = 1460
    wscale: int | None = 7
    window: int = 65535
    snd_nxt: int = 0
    rcv_nxt: int = 0
    iss: int = 0                   # the design's ISN, once known
    peer_wscale: int = 0
    stream: bytearray = field(default_factory=bytearray)   # what the design sent, in order
    pending: dict = field(default_factory=dict)           # out-of-order data the design sent
    seen: list = field(default_factory=list)               # every segment of this connection
    fin: bool = False                                      # the design's FIN arrived
    others: list = field(default_factory=list)             # segments to other ports
    snd_una: int | None = None                             # the design's latest ACK
    mac: str = PEER_MAC
    ip: str = PEER_IP
    design_mac: str = DESIGN_MAC
    design_ip: str = DESIGN_IP

    def __post_init__(self):
        self.snd_nxt = self.isn

    # -- sending -------------------------------------------------------------------------------

    def segment(self, flags="A", *, seq=None, ack=None, data=b"", window=None, options=None,
                sport=None):
        """A segment of this connection (scapy packet), from our current state unless given."""
        tcp = TCP(sport=self.sport if sport is None else sport, dport=self.dport, flags=flags,
                  seq=self.snd_nxt if seq is None else seq,
                  ack=self.rcv_nxt if ack is None else ack,
                  window=self.window if window is None else window,
                  options=options or [])
        return (Ether(src=self.mac, dst=self.design_mac) / IP(src=self.ip, dst=self.design_ip)
                / tcp / data)

    def send(self, flags="A", **kw):
        self.sim.send(self.segment(flags, **kw))

    def send_data(self, data, *, advance=True, **kw):
        self.send("PA", data=data, **kw)
        if advance and kw.get("seq") is None:
            self.snd_nxt = seq_add(self.snd_nxt, len(data))

    def syn_options(self):
        options = [("MSS", self.mss), ("SAckOK", b""), ("Timestamp", (1, 0))]
        if self.wscale is not None:
            options += [("NOP", None), ("WScale", self.wscale)]
        return options

    # -- receiving -------------------------------------------------------------------------------

    def run(self, cycles, *, ack=True, lose=None):
        """Simulate ``cycles`` cycles; take in what the design sent on this connection (checked),
        acknowledge its data unless ``ack`` is false; return the new segments. ``lose(seen)``
        true: the segment is treated as lost on the way (returned, but not taken in)."""
        return run_peers(self.sim, [self], cycles, ack=ack, lose=lose)[self.sport]

    def take(self, seen, lose=None):
        """Take in a segment the design sent on this connection."""
        self.seen.append(seen)
        if lose is None or not lose(seen):
            if "A" in seen.flags and (self.snd_una is None
                                      or seq_diff(seen.tcp.ack, self.snd_una) > 0):
                self.snd_una = seen.tcp.ack
            self._take(seen)

    def _take(self, seen):
        tcp = seen.tcp
        if "S" in seen.flags:
            return
        if seen.data:
            self.pending[tcp.seq] = seen.data
        while True:
            for seq, data in list(self.pending.items()):
                offset = seq_diff(self.rcv_nxt, seq)
                if 0 <= offset < len(data):
                    self.stream += data[offset:]
                    self.rcv_nxt = seq_add(seq, len(data))
                    del self.pending[seq]
                    break
                if offset >= len(data):
                    del self.pending[seq]         # old: already have it
                    break
            else:
                break
        if "F" in seen.flags and seq_add(tcp.seq, len(seen.data)) == self.rcv_nxt:
            self.rcv_nxt = seq_add(self.rcv_nxt, 1)
            self.fin = True

    # -- whole steps -----------------------------------------------------------------------------

    def send_syn(self):
        """The SYN (with MSS, SACK-permitted, timestamps, window scale), from our ISN (again, if
        it was sent before)."""
        self.snd_nxt = seq_add(self.isn, 1)
        self.send("S", seq=self.isn, options=self.syn_options(), ack=0)

    def establish(self, synack):
        """Take the design's SYN-ACK (a :class:`Seen`): its ISN and window scale; send the
        handshake's ACK."""
        tcp = synack.tcp
        self.iss = tcp.seq
        self.rcv_nxt = seq_add(tcp.seq, 1)
        self.peer_wscale = dict(tcp.options).get("WScale", 0)
        self.send("A")

    def connect(self, cycles=3000):
        """SYN, SYN-ACK, ACK; returns the SYN-ACK."""
        self.send_syn()
        synack = [s for s in self.run(cycles, ack=False) if s.flags == "SA"]
        assert synack, f"no SYN-ACK: {self.seen!r}"
        assert synack[0].tcp.ack == self.snd_nxt
        self.establish(synack[0])
        return synack[0]

    def exchange(self, data, *, cycles=20000, chunk=None, rounds=20):
        """Send ``data`` (in segments of ``chunk``, default our MSS) and run until the design has
        sent back as much as it was sent in all (or ``rounds`` runs of ``cycles`` passed)."""
        chunk = chunk or self.mss
        want = len(self.stream) + len(data)
        for i in range(0, len(data), chunk):
            self.send_data(data[i:i + chunk])
        for _ in range(rounds):
            self.run(cycles)
            if len(self.stream) >= want:
                break
        return bytes(self.stream)


def run_peers(sim, peers, cycles, *, ack=True, lose=None):
    """Simulate ``cycles`` cycles and give each of ``peers`` (connections over the same
    simulation) the segments the design sent it, checked; each acknowledges data it got unless
    ``ack`` is false. Returns ``{sport: [Seen, ...]}``; segments for no peer go to the first
    peer's ``others``."""
    sim.run(cycles)
    by_port = {p.sport: p for p in peers}
    new: dict[int, list[Seen]] = {p.sport: [] for p in peers}
    for frame in sim.received(clear=True):
        packet = Ether(frame.data)
        if TCP not in packet:
            continue
        assert checksums_ok(frame.data), f"bad checksum: {packet!r}"
        tcp = packet[TCP]
        seen = Seen(tcp, bytes(tcp.payload), frame.cycle_last)
        peer = by_port.get(tcp.dport)
        if peer is None:
            if peers:
                peers[0].others.append(seen)
            continue
        new[peer.sport].append(seen)
        peer.take(seen, lose)
    if ack:
        for peer in peers:
            if any(s.data or "F" in s.flags for s in new[peer.sport]):
                peer.send("A")
    return new
