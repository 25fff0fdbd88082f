"""What FLD leaves to software (FlexDriver §5: "the control plane remains in software"): creating
the NIC's queues over FLD's windows, installing steering rules, reading the error reports.

:class:`FldControl` is that software for a :class:`~flexdriver.nic.NicModel` driven by an
:class:`~flexdriver.fld.Fld` with map ``fld_map``: :meth:`~FldControl.create_queues` makes one
completion queue per direction, the send queues over FLD's ring window, one striding receive
ring over its receive ring window (every buffer posted once: FLD recycles them itself) shared by
every receive queue, and spreads the traffic over the receive queues by RSS;
:meth:`~FldControl.add_rule` installs a rule for a tenant, refusing one that sets a context ID
unless it comes from the trusted operator (the NIC model refuses it too: two walls);
:meth:`~FldControl.errors` gathers what the NIC and FLD counted.
"""

from dataclasses import dataclass
from typing import Any

from .nic import NicError, NicModel, Rule


__all__ = ["FldControl", "RX_CQ", "TX_CQ", "OPERATOR"]

#: The completion queues' numbers on the NIC (send and receive queues are FLD's own numbers).
TX_CQ, RX_CQ = 0, 1
#: The one tenant whose rules may tag packets with a context ID.
OPERATOR = "operator"


@dataclass
class FldControl:
    """The control plane of ``nic`` for FLD's windows ``fld_map`` (a
    :class:`~flexdriver.fld.FldMap`)."""
    nic: NicModel
    fld_map: Any

    def create_queues(self, *, rates: dict[int, float] | None = None) -> None:
        """The completion queues, the send queues (``rates``: bytes per cycle by queue, for
        the NIC's shaping), receive queue 0 with FLD's striding ring and every buffer posted,
        the other receive queues sharing that ring, and RSS over the receive queues."""
        f, nic = self.fld_map, self.nic
        nic.create_cq(TX_CQ, f.tx_cq, f.tx_cq_entries)
        nic.create_cq(RX_CQ, f.rx_cq, f.rx_cq_entries)
        for q in range(f.queues):
            nic.create_sq(q, f.sq_rings + q * f.ring_entries * 64, f.ring_entries, cq=TX_CQ,
                          rate=(rates or {}).get(q))
        nic.create_rq(0, f.rq_ring, f.rq_entries, cq=RX_CQ, stride_bytes=f.stride_bytes)
        for q in range(1, f.rx_queues):
            nic.share_rq(q, 0)
        nic.rq_doorbell(0, f.buffers)
        nic.set_rss(list(range(f.rx_queues)))

    def add_rule(self, rule: Rule, tenant: str) -> None:
        """Install ``rule`` for ``tenant``; only :data:`OPERATOR` may set a context ID
        (:class:`~flexdriver.nic.NicError` otherwise)."""
        if rule.context and tenant != OPERATOR:
            raise NicError(f"tenant {tenant!r} may not tag packets with a context ID "
                           f"({rule.context}); only the operator sets context IDs")
        self.nic.add_rule(rule, trusted=tenant == OPERATOR)

    def errors(self, fld_counts: dict[str, Any] | None = None) -> dict[str, Any]:
        """Every non-zero error count: the NIC's (``tx_errors``, ``out_of_buffer``,
        ``rx_length_errors``, ``cq_overrun``, ``rx_unsteered``) and FLD's, as read from the
        hardware (``fld_counts``: ``rx_dropped``, ``tx_dropped`` by queue, ``stray_reads``)."""
        c = self.nic.counters
        report: dict[str, Any] = {name: dict(getattr(c, name)) for name in
                                  ("tx_errors", "out_of_buffer", "rx_length_errors",
                                   "cq_overrun") if getattr(c, name)}
        if c.rx_unsteered:
            report["rx_unsteered"] = c.rx_unsteered
        for name, value in (fld_counts or {}).items():
            if isinstance(value, (list, tuple)):
                value = {q: v for q, v in enumerate(value) if v}
            if value:
                report[f"fld_{name}"] = value
        return report
