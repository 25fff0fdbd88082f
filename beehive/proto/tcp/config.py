"""What the two TCP tiles must agree on: one :class:`TcpConfig`, given to both."""

from dataclasses import dataclass

from apiary.stream.sizing import bdp_bytes, ring_bytes


__all__ = ["TcpConfig", "CONGESTION_CONTROL", "HALF_OPEN_BURST", "config_or_default"]


#: The congestion-control algorithms: ``"newreno"`` (RFC 6582: slow start, congestion
#: avoidance, fast retransmit and fast recovery with partial ACKs) or ``"none"`` (the window is
#: the peer's advertised window alone; fast retransmit and timeouts still resend).
CONGESTION_CONTROL = ("newreno", "none")


def _pow2(value: object, what: str, low: int = 1, high: int = 1 << 30) -> int:
    if (not isinstance(value, int) or isinstance(value, bool) or value < low or value > high
            or value & (value - 1)):
        raise ValueError(f"{what} must be a power of two from {low} to {high}, not {value!r}")
    return value


def _int(value: object, what: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{what} must be an integer from {low} to {high}, not {value!r}")
    return value


#: Simultaneous connects every engine takes by default, whatever its size (up to its flows):
#: see ``TcpConfig.max_half_open``.
HALF_OPEN_BURST = 8


@dataclass(frozen=True)
class TcpConfig:
    """The parameters of a TCP engine (its receive and its transmit tile take the same one).

    Sizes
        ``flows`` flow slots (a power of two, up to 4,096; the flow table holds them in two banks
        of ``flows / ways`` buckets of ``ways``, up to 8: :mod:`~beehive.proto.tcp.flow_table`);
        each flow owns a receive ring of ``rx_ring`` bytes at
        ``rx_base + slot * rx_ring`` in the receive buffer's memory tile and a send ring of
        ``tx_ring`` bytes at ``tx_base + slot * tx_ring`` in the send buffer's. ``mss`` is the
        largest segment payload the engine sends or advertises. ``max_half_open`` caps the
        connections in SYN-RECEIVED (a SYN flood holds at most that many slots); by default
        :data:`HALF_OPEN_BURST` or a quarter of the flows, whichever is more, and never more
        than the flows: a small design takes a burst of simultaneous connects to all its slots
        (4 flows: 4 at once, where a quarter would drop 3 SYNs and make Linux retry after a
        second), a large one keeps most of its slots from a SYN flood. ``segment_buffer``
        bytes of arriving segments wait in the receive tile while they are checked and stored
        (a burst beyond it is dropped, counted in ``overflow``, and sent again by the peer).
    Timers (in clock cycles; the timer counts ticks of ``tick`` cycles, a power of two at
    least ``flows``, so every timer is checked once a tick)
        ``rto``: the retransmission timeout until the flow's first round-trip sample; then
        RFC 6298's SRTT + 4 RTTVAR (never below ``rto_min``, which is ``rto`` unless set, as
        RFC 6298 keeps it at least its initial second); doubled on each expiry up to
        ``rto_max``, back on a new ACK; ``max_retries`` expiries in a row drop the connection
        (``syn_retries`` during the handshake); ``linger``: TIME-WAIT, and how long a
        connection waits in FIN-WAIT-2 for the peer's FIN.
    Congestion control
        ``cc`` (:data:`CONGESTION_CONTROL`), ``initial_window`` segments (RFC 6928: 10).
    Selective acknowledgements (RFC 2018)
        ``sack``: offer SACK-permitted on SYNs and take it from a peer's; on a connection that
        agreed, each ACK sent while out-of-order bytes wait in the receive ring reports them
        as a SACK block, so the peer resends only what is missing.
    Under Apiary (the tiles placed untrusted)
        ``spare`` pairs of rings the receive tile allocates ahead of the connections that take
        them (:mod:`beehive.proto.tcp.segments`); ``rx_base`` and ``tx_base`` are unused.
    """

    flows: int = 256
    ways: int = 4
    rx_ring: int = 16384
    tx_ring: int = 16384
    rx_base: int = 0
    tx_base: int = 0
    mss: int = 1460
    max_half_open: int | None = None
    segment_buffer: int = 8192
    rto: int = 1_000_000
    rto_max: int | None = None
    rto_min: int | None = None
    max_retries: int = 8
    syn_retries: int = 5
    linger: int = 2_500_000
    tick: int | None = None
    cc: str = "newreno"
    initial_window: int = 10
    sack: bool = True
    spare: int = 2

    def __post_init__(self) -> None:
        _pow2(self.flows, "flows", 2, 4096)
        _pow2(self.ways, "ways", 1, min(8, self.flows))
        _pow2(self.rx_ring, "rx_ring", 64, 1 << 30)
        _pow2(self.tx_ring, "tx_ring", 64, 1 << 30)
        _int(self.mss, "mss", 64, 9000)
        _int(self.spare, "spare", 1, 16)
        if self.mss > min(self.rx_ring, self.tx_ring) // 2:
            raise ValueError(f"mss ({self.mss}) must be at most half of each ring "
                             f"(rx_ring {self.rx_ring}, tx_ring {self.tx_ring})")
        for name in ("rx_base", "tx_base"):
            _int(getattr(self, name), name, 0, (1 << 48) - 1)
        _int(self.half_open, "max_half_open", 1, self.flows)
        _int(self.segment_buffer, "segment_buffer", 2 * 1480, 1 << 20)
        _int(self.rto, "rto", 1, 1 << 30)
        _int(self.rto_ceiling, "rto_max", self.rto, 1 << 34)
        _int(self.rto_floor, "rto_min", 1, self.rto_ceiling)
        _int(self.max_retries, "max_retries", 1, 15)
        _int(self.syn_retries, "syn_retries", 1, 15)
        _int(self.linger, "linger", 1, 1 << 40)
        if self.tick is not None:
            _pow2(self.tick, "tick", self.flows, 1 << 24)
        if self.cc not in CONGESTION_CONTROL:
            raise ValueError(f"cc must be one of {', '.join(CONGESTION_CONTROL)}, "
                             f"not {self.cc!r}")
        _int(self.initial_window, "initial_window", 1, 64)
        if not isinstance(self.sack, bool):
            raise ValueError(f"sack must be True or False, not {self.sack!r}")

    @property
    def half_open(self) -> int:
        if self.max_half_open is not None:
            return self.max_half_open
        return max(min(self.flows, HALF_OPEN_BURST), self.flows // 4)

    @property
    def rto_ceiling(self) -> int:
        return self.rto_max if self.rto_max is not None else 64 * self.rto

    @property
    def rto_floor(self) -> int:
        return self.rto_min if self.rto_min is not None else self.rto

    @property
    def tick_cycles(self) -> int:
        if self.tick is not None:
            return self.tick
        tick = 1024
        while tick < self.flows:
            tick *= 2
        return tick

    def ticks(self, cycles: int) -> int:
        """``cycles`` in timer ticks, rounded up (at least one)."""
        return max(1, -(-cycles // self.tick_cycles))

    @property
    def rx_ring_log2(self) -> int:
        return self.rx_ring.bit_length() - 1

    @property
    def tx_ring_log2(self) -> int:
        return self.tx_ring.bit_length() - 1

    @property
    def max_segment(self) -> int:
        """The longest segment the receive tile takes, TCP header and data: 1,480 bytes (a
        1,500-byte MTU's IPv4 payload), or an ``mss``-byte segment's with a 20-byte header if
        that is longer (jumbo frames: ``mss=8960`` for a 9,000-byte MTU; a sender counts its
        options in the MSS, RFC 6691)."""
        return max(1480, self.mss + 20)

    @property
    def wscale(self) -> int:
        """The window-scale shift the engine offers: its receive ring, advertised whole."""
        shift = 0
        while self.rx_ring >> shift > 0xFFFF:
            shift += 1
        return shift

    @classmethod
    def for_link(cls, rate_bps: float, rtt: float, **params: object) -> "TcpConfig":
        """A configuration whose rings keep one connection at ``rate_bps`` (bits per second)
        over a round trip of ``rtt`` seconds: each ring is the smallest power of two that holds
        the bandwidth-delay product ``rate_bps * rtt / 8`` (:func:`apiary.stream.sizing.ring_bytes`;
        the send ring holds data until it is acknowledged, one round trip, and the receive ring
        must advertise that much window), and at least ``2 * mss``. ``params`` are the other
        fields (``rx_ring`` and ``tx_ring`` excepted).
        """
        for name in ("rx_ring", "tx_ring"):
            if name in params:
                raise ValueError(f"TcpConfig.for_link picks {name} from the rate and round trip; "
                                 f"do not pass it")
        mss = params.get("mss", cls.mss)
        ring = ring_bytes(rate_bps, rtt, at_least=2 * mss if isinstance(mss, int) else 64)
        if ring > 1 << 30:
            raise ValueError(f"{rate_bps:g} b/s over a {rtt:g} s round trip needs "
                             f"{bdp_bytes(rate_bps, rtt):,.0f} bytes in flight, more than a "
                             f"ring holds (1 GiB)")
        return cls(rx_ring=ring, tx_ring=ring, **params)  # type: ignore[arg-type]

    def link_rate(self, rtt: float) -> float:
        """The rate in bits per second one connection can sustain over a round trip of ``rtt``
        seconds with these rings (the smaller ring over the round trip)."""
        return min(self.rx_ring, self.tx_ring) * 8 / rtt

    def rx_memory_bytes(self) -> int:
        """Bytes the receive buffer's memory tile must hold."""
        return self.rx_base + self.flows * self.rx_ring

    def tx_memory_bytes(self) -> int:
        return self.tx_base + self.flows * self.tx_ring


def config_or_default(config: object) -> TcpConfig:
    """``config`` if it is a :class:`TcpConfig`, the default one for ``None``; a ``TypeError``
    otherwise (what every TCP tile takes as ``config=``)."""
    if config is None:
        return TcpConfig()
    if not isinstance(config, TcpConfig):
        raise TypeError(f"config must be a TcpConfig, not {config!r}")
    return config
