"""Network functions: tiles on the packet path whose tables the control plane changes while
traffic flows (NAT, IP-in-IP, VXLAN), and load balancers in front of replicated tiles."""

from .balancer import LoadBalancerTile  # noqa: F401
