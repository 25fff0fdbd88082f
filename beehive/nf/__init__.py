"""Network functions: tiles on the packet path whose tables the control plane changes while
traffic flows (NAT, IP-in-IP, VXLAN), and load balancers in front of replicated tiles."""

from .balancer import LoadBalancerTile
from .base import NfTile
from .ipip import IpipDecapTile, IpipEncapTile, ipip_route
from .nat import NatTile, nat_rule
from .vxlan import VxlanDecapTile, VxlanEncapTile, vxlan_peer

__all__ = ["LoadBalancerTile", "NfTile", "IpipDecapTile", "IpipEncapTile", "ipip_route",
           "NatTile", "nat_rule", "VxlanDecapTile", "VxlanEncapTile", "vxlan_peer"]
