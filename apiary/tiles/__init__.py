"""Generic tiles that know no protocol: forwarding placeholders, external NoC ports, frame
ports, NoC messages as frames, control messages as frames, a logging tile; wrappers that put
opt-in stages between a tile and its router (the no-backpressure receive guard, transmit
credits) and, in front of a shared service, credited queues and per-tenant rate limits."""

from .forward import ForwardTile
from .port import PortTile
from .frame_port import FramePortTile
from .raw_port import RawPortTile
from .ctl_port import ControlPortTile
from .log import LogTile
from .wrapper import TileWrapper
from .rx_guard import RxGuardTile
from .tx_credit import TxCreditTile
from .credit_queues import CreditQueuesTile
from .tenant_shaper import TenantShaperTile, tenant_places

__all__ = ["ForwardTile", "PortTile", "FramePortTile", "RawPortTile", "ControlPortTile", "LogTile",
           "TileWrapper", "RxGuardTile",
           "TxCreditTile", "CreditQueuesTile", "TenantShaperTile",
           "tenant_places"]
