"""TCP (RFC 9293) in two tiles sharing per-flow state, as Beehive's engine, and beyond it: active
open, a reorder buffer reported to the peer in SACK blocks (RFC 2018), a retransmission timer
with back-off, NewReno congestion control, zero-window probes, a bounded half-open table.

* :mod:`~beehive.proto.tcp.header`: the header, flags, options, sequence arithmetic;
* :mod:`~beehive.proto.tcp.app`: the application interface (messages, handles, statuses);
* :mod:`~beehive.proto.tcp.config`: :class:`TcpConfig`, what both tiles agree on;
* :mod:`~beehive.proto.tcp.state`: the per-flow records and the wires between the tiles;
* :mod:`~beehive.proto.tcp.flow_table`: the 4-tuple hash table;
* :mod:`~beehive.proto.tcp.rx`: :class:`TcpRxTile`;
* :mod:`~beehive.proto.tcp.tx`: :class:`TcpTxTile`.
"""

from .config import TcpConfig
from .rx import TcpRxTile
from .tx import TcpTxTile

__all__ = ["TcpConfig", "TcpRxTile", "TcpTxTile"]
