"""Buffer and descriptor sizing from the bandwidth-delay product (FlexDriver, ASPLOS'22, §4.3).

A queue that must keep a link of rate ``B`` busy needs every buffer it hands out to stay owned
for the buffer's *lifetime* ``L`` (allocation to completion: for TCP, until the ACK comes back,
one round trip). So it needs

=====================  ===================  ==================================================
packet rate            ``R = B / (M_min + 20 B)``  (20 B: preamble, SFD and inter-frame gap)
descriptors            ``N = ceil(R * L)``  one per packet in flight, at the smallest packet
bytes in flight (BDP)  ``S_bdp = B * L``    the lower bound on the buffer to meet line rate
=====================  ===================  ==================================================

and a ring of ``N`` entries is allocated as ``f(N) = 2**ceil(log2 N)``. :class:`LinkSizing`
computes these from the link, the packet sizes, the lifetimes and the number of queues;
:func:`software_memory` and :func:`flexdriver_memory` compute the paper's Table 3 (a ConnectX
driver's structures per queue against FlexDriver's shared, compressed ones), and
:func:`ring_bytes` picks a power-of-two ring that holds a BDP (what
:meth:`beehive.proto.tcp.TcpConfig.for_link` uses).

``python -m apiary.stream.sizing`` prints the tables for the paper's parameters (Table 2a);
``--rate``, ``--rx-lifetime``, ``--tx-lifetime``, ``--queues``, ``--min-packet`` and
``--max-packet`` change them. Pure Python: nothing here builds hardware.
"""

import argparse
import math
from dataclasses import dataclass


__all__ = ["LinkSizing", "DescriptorSizes", "SOFTWARE", "FLEXDRIVER", "software_memory",
           "flexdriver_memory", "pow2_at_least", "ring_bytes", "bdp_bytes", "format_bytes",
           "table", "main"]

KiB = 1024
MiB = 1024 * KiB

#: Bytes an Ethernet frame costs on the wire beyond itself: preamble and SFD (8), gap (12).
WIRE_OVERHEAD = 20


def pow2_at_least(n: int) -> int:
    """``f(n) = 2**ceil(log2 n)``: the power-of-two allocation that holds ``n`` (1 for 0 or 1)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"a count to round up to a power of two must be a non-negative "
                         f"integer, not {n!r}")
    return 1 << (n - 1).bit_length() if n > 1 else 1


def _positive(value: object, what: str) -> float:
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0
            or not math.isfinite(value)):
        raise ValueError(f"{what} must be a positive number, not {value!r}")
    return float(value)


def bdp_bytes(rate_bps: float, lifetime_s: float) -> float:
    """Bandwidth-delay product in bytes: ``rate_bps * lifetime_s / 8``."""
    return _positive(rate_bps, "the rate (bits per second)") * _positive(
        lifetime_s, "the lifetime (seconds)") / 8


def ring_bytes(rate_bps: float, lifetime_s: float, *, at_least: int = 64) -> int:
    """The smallest power-of-two buffer that holds the bandwidth-delay product, and at least
    ``at_least`` bytes: a ring that keeps a queue at ``rate_bps`` when each byte stays in it
    ``lifetime_s`` seconds."""
    return pow2_at_least(max(int(at_least), math.ceil(bdp_bytes(rate_bps, lifetime_s))))


@dataclass(frozen=True)
class LinkSizing:
    """A link and its queues (the paper's Table 2a), and what they need.

    Parameters: ``rate_bps`` (B), ``min_packet`` and ``max_packet`` bytes (M_min, M_max),
    ``rx_lifetime`` and ``tx_lifetime`` seconds (L_rx, L_tx), ``queues`` transmit queues (N_q).
    The defaults are the paper's: 100 Gb/s, 256 B / 16 KiB, 5 / 25 µs, 512 queues.
    """

    rate_bps: float = 100e9
    min_packet: int = 256
    max_packet: int = 16 * KiB
    rx_lifetime: float = 5e-6
    tx_lifetime: float = 25e-6
    queues: int = 512

    def __post_init__(self) -> None:
        _positive(self.rate_bps, "rate_bps")
        _positive(self.rx_lifetime, "rx_lifetime")
        _positive(self.tx_lifetime, "tx_lifetime")
        for name in ("min_packet", "max_packet", "queues"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.max_packet < self.min_packet:
            raise ValueError(f"max_packet ({self.max_packet}) must be at least min_packet "
                             f"({self.min_packet})")

    @property
    def packet_rate(self) -> float:
        """R: packets per second at the smallest packet, wire overhead included."""
        return self.rate_bps / ((self.min_packet + WIRE_OVERHEAD) * 8)

    @property
    def tx_descriptors(self) -> int:
        """N_txdesc = ceil(R * L_tx)."""
        return math.ceil(self.packet_rate * self.tx_lifetime)

    @property
    def rx_descriptors(self) -> int:
        """N_rxdesc = ceil(R * L_rx)."""
        return math.ceil(self.packet_rate * self.rx_lifetime)

    @property
    def tx_bdp(self) -> float:
        """S_txbdp = B * L_tx, in bytes."""
        return bdp_bytes(self.rate_bps, self.tx_lifetime)

    @property
    def rx_bdp(self) -> float:
        """S_rxbdp = B * L_rx, in bytes."""
        return bdp_bytes(self.rate_bps, self.rx_lifetime)


@dataclass(frozen=True)
class DescriptorSizes:
    """Sizes of a driver's entries in bytes (the paper's Table 2b); ``rx_desc`` 0 when the
    receive ring is not kept (FlexDriver leaves it in host memory)."""
    tx_desc: int
    rx_desc: int
    cqe: int
    producer_index: int


#: A ConnectX driver's entries (Table 2b, "Software").
SOFTWARE = DescriptorSizes(tx_desc=64, rx_desc=16, cqe=64, producer_index=4)
#: FlexDriver's compressed entries (Table 2b, "FLD").
FLEXDRIVER = DescriptorSizes(tx_desc=8, rx_desc=0, cqe=15, producer_index=4)


def _common(link: LinkSizing, sizes: DescriptorSizes) -> dict[str, float]:
    return {
        "completion_queue": (pow2_at_least(link.tx_descriptors)
                             + pow2_at_least(link.rx_descriptors)) * sizes.cqe,
        "producer_indices": (link.queues + 1) * sizes.producer_index,
    }


def software_memory(link: LinkSizing = LinkSizing(),
                    sizes: DescriptorSizes = SOFTWARE) -> dict[str, float]:
    """Bytes of each structure a conventional driver keeps (Table 3, "Software"), and
    ``total``: a ring per queue, and buffers of the largest packet per descriptor."""
    rows = {
        "tx_rings": link.queues * pow2_at_least(link.tx_descriptors) * sizes.tx_desc,
        "tx_buffers": link.max_packet * link.tx_descriptors,
        "rx_buffers": link.max_packet * link.rx_descriptors,
        **_common(link, sizes),
        "rx_ring": pow2_at_least(link.rx_descriptors) * sizes.rx_desc,
    }
    rows = {k: rows[k] for k in ("tx_rings", "tx_buffers", "rx_buffers", "completion_queue",
                                  "rx_ring", "producer_indices")}
    rows["total"] = sum(rows.values())
    return rows


def flexdriver_memory(link: LinkSizing = LinkSizing(), sizes: DescriptorSizes = FLEXDRIVER, *,
                      tx_translation: float = 15.5 * KiB,
                      data_translation: float = 33 * KiB) -> dict[str, float]:
    """Bytes of each structure FlexDriver keeps (Table 3, "FLD"), and ``total``: one shared pool
    of transmit descriptors behind a translation table (``tx_translation`` bytes: the paper's
    4-bank cuckoo hash, 15.5 KiB), buffers of twice the BDP shared by all queues (transmit ones
    behind a ``data_translation``-byte table, 33 KiB in the paper)."""
    rows = {
        "tx_rings": pow2_at_least(link.tx_descriptors) * sizes.tx_desc + tx_translation,
        "tx_buffers": 2 * link.tx_bdp + data_translation,
        "rx_buffers": 2 * link.rx_bdp,
        **_common(link, sizes),
        "rx_ring": 0,
    }
    rows = {k: rows[k] for k in ("tx_rings", "tx_buffers", "rx_buffers", "completion_queue",
                                  "rx_ring", "producer_indices")}
    rows["total"] = sum(rows.values())
    return rows


def format_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit that keeps it at least 1, two decimals."""
    for unit, size in (("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def table(link: LinkSizing = LinkSizing()) -> str:
    """The paper's Table 2a and Table 3 for ``link``, as Markdown."""
    sw, fld = software_memory(link), flexdriver_memory(link)
    lines = [
        "| parameter | value |", "|---|---|",
        f"| link rate B | {link.rate_bps / 1e9:g} Gb/s |",
        f"| packet sizes M_min / M_max | {link.min_packet} B / {link.max_packet} B |",
        f"| lifetimes L_rx / L_tx | {link.rx_lifetime * 1e6:g} / {link.tx_lifetime * 1e6:g} µs |",
        f"| transmit queues N_q | {link.queues} |",
        f"| packet rate R | {link.packet_rate / 1e6:.2f} Mpps |",
        f"| descriptors N_txdesc / N_rxdesc | {link.tx_descriptors} / {link.rx_descriptors} |",
        f"| BDP S_txbdp / S_rxbdp | {format_bytes(link.tx_bdp)} / {format_bytes(link.rx_bdp)} |",
        "",
        "| structure | software | FlexDriver | shrink |", "|---|---|---|---|",
    ]
    for name in sw:
        ratio = f"×{sw[name] / fld[name]:.1f}" if fld[name] else "-"
        lines.append(f"| {name.replace('_', ' ')} | {format_bytes(sw[name])} | "
                     f"{format_bytes(fld[name]) if fld[name] else '-'} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """``python -m apiary.stream.sizing``: print :func:`table` for the given link."""
    default = LinkSizing()
    p = argparse.ArgumentParser(prog="python -m apiary.stream.sizing",
                                description="Descriptor and buffer sizes from the "
                                            "bandwidth-delay product (FlexDriver Tables 2-3).")
    p.add_argument("--rate", type=float, default=default.rate_bps / 1e9, help="link Gb/s")
    p.add_argument("--min-packet", type=int, default=default.min_packet, help="bytes")
    p.add_argument("--max-packet", type=int, default=default.max_packet, help="bytes")
    p.add_argument("--rx-lifetime", type=float, default=default.rx_lifetime * 1e6, help="µs")
    p.add_argument("--tx-lifetime", type=float, default=default.tx_lifetime * 1e6, help="µs")
    p.add_argument("--queues", type=int, default=default.queues, help="transmit queues")
    args = p.parse_args(argv)
    try:
        link = LinkSizing(rate_bps=args.rate * 1e9, min_packet=args.min_packet,
                          max_packet=args.max_packet, rx_lifetime=args.rx_lifetime * 1e-6,
                          tx_lifetime=args.tx_lifetime * 1e-6, queues=args.queues)
    except ValueError as e:
        p.error(str(e))
    print(table(link))


if __name__ == "__main__":
    main()
