"""How the leader reaches its witness: one interface, three ends.

* :class:`LocalWitness`: a :class:`~beehive.vr.witness.SoftwareWitness` in this process (the
  all-software group's CPU witness);
* :class:`UdpWitness`: a witness at an IP address and port (the FPGA, or a simulated design
  behind a TAP device);
* :class:`SimWitness`: a witness tile in a simulated design (:func:`apiary.sim.open_sim`),
  frames built and parsed with scapy; it records every exchange's cycles.

Each has :meth:`~WitnessLink.request` (send a message, return the reply, ``None`` if none
came) and :meth:`~WitnessLink.send` (a message with no reply, COMMIT).
"""

import dataclasses
import socket
from typing import Any, Protocol

from .witness import SoftwareWitness


__all__ = ["WitnessLink", "LocalWitness", "UdpWitness", "SimWitness", "Exchange",
           "udp_replies", "STACK_MAC", "STACK_IPV4", "PEER_MAC", "PEER_IPV4"]

#: The simulated design's addresses (``examples/vr_witness.py``'s defaults) and the leader's.
STACK_MAC, STACK_IPV4 = "02:00:00:00:00:02", "10.0.0.2"
PEER_MAC, PEER_IPV4 = "52:54:00:12:34:56", "10.0.0.1"


class WitnessLink(Protocol):
    def request(self, payload: bytes) -> bytes | None: ...

    def send(self, payload: bytes) -> None: ...


class LocalWitness:
    """A :class:`SoftwareWitness` called directly; ``alive = False`` makes it silent (a crashed
    witness)."""

    def __init__(self, witness: SoftwareWitness) -> None:
        self.witness = witness
        self.alive = True

    def request(self, payload: bytes) -> bytes | None:
        return self.witness.handle(payload) if self.alive else None

    def send(self, payload: bytes) -> None:
        self.request(payload)


class UdpWitness:
    """A witness at ``(host, port)`` over a UDP socket; a reply must come within ``timeout``
    seconds (VR over UDP: a lost message is a missing vote)."""

    def __init__(self, address: tuple[str, int], timeout: float = 0.05) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(timeout)

    def request(self, payload: bytes) -> bytes | None:
        self.sock.sendto(payload, self.address)
        while True:                 # a datagram from elsewhere is not the witness's answer
            try:
                reply, source = self.sock.recvfrom(2048)
            except TimeoutError:
                return None
            if source == self.address:
                return reply

    def send(self, payload: bytes) -> None:
        self.sock.sendto(payload, self.address)

    def close(self) -> None:
        self.sock.close()


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One request to a simulated witness: the cycle its frame's first word went in, the cycle
    its reply's last word came out (``None``: no reply)."""
    cycle_in: int
    cycle_out: int | None

    @property
    def cycles(self) -> int | None:
        return None if self.cycle_out is None else self.cycle_out - self.cycle_in


def udp_replies(sim: Any) -> list[tuple[int, bytes, int]]:
    """``(source port, payload, cycle of the frame's last word)`` of every UDP frame the
    simulated design ``sim`` sent since last asked."""
    from scapy.layers.inet import UDP
    from scapy.layers.l2 import Ether
    out = []
    for frame in sim.received(clear=True):
        pkt = Ether(frame.data)
        if UDP in pkt:
            out.append((pkt[UDP].sport, bytes(pkt[UDP].payload), frame.cycle_last))
    return out


class SimWitness:
    """The witness on UDP port ``port`` of a simulated design ``sim`` (an open
    :class:`~apiary.sim.Sim`). Each request is one frame in and a run until the design is idle
    (no reply by then: ``None``); :attr:`exchanges` keeps their cycles. ``mac`` and ``ipv4``
    are the design's addresses (a board of an :class:`apiary.sim.cluster.Cluster`, reached
    through a host of the cluster passed as ``sim``, has its own)."""

    def __init__(self, sim: Any, port: int, *, sport: int = 40000, mac: str = STACK_MAC,
                 ipv4: str = STACK_IPV4) -> None:
        self.sim, self.port, self.sport = sim, port, sport
        self.mac, self.ipv4 = mac, ipv4
        self.exchanges: list[Exchange] = []

    def frame(self, payload: bytes, dport: int | None = None) -> bytes:
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        return bytes(Ether(dst=self.mac, src=PEER_MAC) / IP(src=PEER_IPV4, dst=self.ipv4)
                     / UDP(sport=self.sport, dport=self.port if dport is None else dport)
                     / payload)

    def replies(self, port: int | None = None) -> list[tuple[bytes, int]]:
        """``(payload, cycle of the frame's last word)`` of the UDP replies from ``port`` (the
        witness's) the design sent since last asked (the others are forgotten)."""
        port = self.port if port is None else port
        return [(payload, cycle) for sport, payload, cycle in udp_replies(self.sim)
                if sport == port]

    def exchange(self, payload: bytes, dport: int | None = None) -> bytes | None:
        """Send ``payload`` to ``dport`` (the witness's port by default), run until idle, return
        the last reply from that port."""
        self.sim.send(self.frame(payload, dport))
        self.sim.run()
        sent = self.sim.sent(clear=True)
        got = self.replies(dport)
        self.exchanges.append(Exchange(sent[-1].cycle_first if sent else self.sim.cycle,
                                       got[-1][1] if got else None))
        return got[-1][0] if got else None

    def request(self, payload: bytes) -> bytes | None:
        return self.exchange(payload)

    def send(self, payload: bytes) -> None:
        self.exchange(payload)
