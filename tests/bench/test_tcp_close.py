"""Closing the TCP benchmarks' connections (harness.bench.tcp_conn._close_all): once every peer
has seen the engine's FIN, the peers go on answering until the engine's counters say it freed
every connection (a last ACK lost in a burst of closes leaves the engine's FIN to be sent
again after its retransmission timeout, and its slot held until that is answered), and no
longer than ``patience``. A stand-in simulation and peers play both sides."""

from harness.bench import tcp_conn


class Engine:
    """Counts as closed, once ``frees_at`` (per connection) has passed while its peer was
    answering; ``counts``: whether the design has the counters at all."""

    def __init__(self, frees_at, counts=True):
        self.cycle, self.frees_at, self.counts = 0, frees_at, counts
        self.answered_until = 0

    def counters(self):
        if not self.counts:
            return {"udp_rx_forwarded": 5}
        closed = sum(1 for at in self.frees_at if at is not None and self.answered_until >= at)
        return {"tcp_rx_closed": closed, "tcp_rx_reset": 0, "tcp_rx_opened": len(self.frees_at)}


class Peer:
    def __init__(self):
        self.snd_una = self.snd_nxt = 100
        self.fin = False

    def send(self, flags, seq=None):
        pass


def closing(monkeypatch, engine, peers):
    def run_peers(sim, running, cycles, ack=True):
        assert sim is engine and running == peers and ack
        sim.cycle += cycles
        sim.answered_until = sim.cycle
        for p in running:                   # the FIN is acknowledged, the engine's seen
            p.snd_una, p.fin = p.snd_nxt, True
    monkeypatch.setattr(tcp_conn, "run_peers", run_peers)


def test_the_peers_answer_until_the_engine_has_freed_every_connection(monkeypatch):
    engine, peers = Engine([1_000, 1_000, 215_000]), [Peer(), Peer(), Peer()]
    closing(monkeypatch, engine, peers)
    tcp_conn._close_all(engine, peers)
    assert engine.counters()["tcp_rx_closed"] == 3
    assert 215_000 <= engine.cycle < 225_000 + 1_500       # in steps of 10,000 after 1,500


def test_closing_returns_once_the_peers_are_done_when_nothing_lingers(monkeypatch):
    engine, peers = Engine([1_000, 1_000]), [Peer(), Peer()]
    closing(monkeypatch, engine, peers)
    tcp_conn._close_all(engine, peers)
    assert engine.cycle == 1_500                            # 1,000, then 500 more


def test_a_connection_never_freed_is_waited_for_patience_cycles_only(monkeypatch):
    engine, peers = Engine([1_000, None]), [Peer(), Peer()]
    closing(monkeypatch, engine, peers)
    tcp_conn._close_all(engine, peers, patience=50_000)
    assert engine.cycle == 1_500 + 50_000


def test_a_design_without_the_engines_counters_is_not_waited_for(monkeypatch):
    engine, peers = Engine([None], counts=False), [Peer()]
    closing(monkeypatch, engine, peers)
    tcp_conn._close_all(engine, peers)
    assert engine.cycle == 1_500
