"""Opening and closing the TCP benchmarks' connections: a scripted peer per connection
(:class:`~harness.bench.tcp_peer.Peer`), all opened at once and closed together; and the
goodput of a transfer's second half. Shared by the echo benchmark (:mod:`harness.bench.tcp`),
the sink's (:mod:`harness.bench.sink`) and the Reed-Solomon one (:mod:`harness.bench.rs`)."""

from beehive.proto.addresses import design_addresses
from .echo import BenchError
from .tcp_peer import Peer, run_peers, seq_add


__all__ = ["PORT", "_peers", "_connect_all", "_close_all", "second_half"]

#: The echo's port.
PORT = 7


def _peers(sim, design, count, base=20000, port=PORT, ports=None):
    """``count`` peers from ports ``base`` up, or from ``ports`` (a list)."""
    mac, ipv4 = design_addresses(design)
    ports = range(base, base + count) if ports is None else ports
    return [Peer(sim, sport=sport, dport=port, isn=1000 + 7919 * i, design_mac=mac,
                 design_ip=ipv4) for i, sport in enumerate(ports)]


def _connect_all(sim, peers):
    """Open every connection: SYNs all at once, sent again (as a real client would) to those a
    bounded half-open table turned away."""
    waiting = list(peers)
    for _ in range(200):
        for p in waiting:
            p.send_syn()
        run_peers(sim, waiting, 1000, ack=False)
        still = []
        for p in waiting:
            synack = [s for s in p.seen if s.flags == "SA"]
            if synack:
                p.establish(synack[0])
            else:
                still.append(p)
        waiting = still
        if not waiting:
            break
    else:
        raise BenchError(f"{len(waiting)} of {len(peers)} connections got no SYN-ACK")
    run_peers(sim, peers, 200, ack=False)


def _freed(sim):
    """Connections the engine (a tile named ``tcp_rx``) has closed or reset so far, or
    ``None`` if the design counts none."""
    counters = sim.counters()
    if "tcp_rx_closed" not in counters:
        return None
    return counters["tcp_rx_closed"] + counters.get("tcp_rx_reset", 0)


def _close_all(sim, peers, patience=1_000_000):
    """Close every connection (we close first; the echo closes after the end of the stream),
    so that their slots are free for the next measurement: the peers go on answering until
    the engine has freed them all (a last ACK lost in a burst of closes leaves the engine's FIN
    to be sent again after its retransmission timeout), for up to ``patience`` cycles."""
    freed = _freed(sim)
    for p in peers:
        p.send("FA")
        p.snd_nxt = seq_add(p.snd_nxt, 1)
    for _ in range(100):
        run_peers(sim, peers, 1000)
        if all(p.fin for p in peers):
            break
        for p in peers:
            if p.snd_una != p.snd_nxt:        # our FIN was lost in the burst: again
                p.send("FA", seq=seq_add(p.snd_nxt, -1))
    else:
        raise BenchError(f"{sum(not p.fin for p in peers)} connections did not close")
    run_peers(sim, peers, 500)
    limit = sim.cycle + patience
    while freed is not None and _freed(sim) - freed < len(peers) and sim.cycle < limit:
        run_peers(sim, peers, 10_000)


def second_half(marks, total):
    """``(cycles, bytes per cycle)`` of a transfer of ``total`` bytes over its second half:
    from the first of ``marks`` (``(cycle, bytes so far)``, in order) at or past half the bytes
    to the last."""
    start = next((c, b) for c, b in marks if b >= total // 2)
    end = marks[-1]
    cycles = end[0] - start[0]
    return cycles, (end[1] - start[1]) / cycles
