"""UDP echo with FlexDriver's network contract for two more applications, beside the plain echo
of ``examples/udp_echo.py`` (port 7), on a 4 × 3 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx ─▶ (3,0) fast   port 9, sends with credits
      │               │               │    └──────▶ (3,2) slow   port 8, receive guard + credits
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx ◀─ (3,1) credits  a queue per sender
      ▲               ▲               ▲
    (0,2) arp       (1,2) icmp      (2,2) echo    port 7, the default path

``slow`` (:class:`~beehive.apps.busy_echo.UdpBusyEchoTile`, one message every ``slow_cycles``)
sits behind an :class:`~apiary.tiles.RxGuardTile`: when it falls behind, its own requests are
dropped (``slow_rx_guard_dropped``) and UDP RX never waits for it, so ``fast`` and ``echo``
keep their rate. ``fast`` and ``slow`` send their replies through
:class:`~apiary.tiles.CreditQueuesTile` with credits (:class:`~apiary.tiles.TxCreditTile`): a
queue each, so the slow one's replies never hold up the fast one's.

    apiary check examples/udp_flexdriver.py
    apiary show  examples/udp_flexdriver.py -o udp_flexdriver.svg

``design(width=512, slow_cycles=2000, queue_flits=64, guard_flits=64)``.
"""

from apiary.design import Design
from apiary.load import sibling
from apiary.tiles import CreditQueuesTile, RxGuardTile, TxCreditTile
from beehive.apps import UdpEchoTile
from beehive.apps.busy_echo import UdpBusyEchoTile
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC


udp_echo = sibling(__file__, "udp_echo.py")

FAST_PORT, SLOW_PORT = 9, 8


def design(width=512, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, slow_cycles=2000, queue_flits=64,
           guard_flits=64):
    d = Design("udp_flexdriver", cols=4, rows=3, width=width)
    d.settings.update(mac=mac, ipv4=ipv4)
    udp_echo.build_stack(d, udp_echo.ECHO_PORT)
    credits = (3, 1)
    d.add("fast", TxCreditTile, at=(3, 0), tile=UdpEchoTile, service=credits,
          credits=queue_flits)
    d.add("slow", TxCreditTile, at=(3, 2),
          tile=RxGuardTile.of(UdpBusyEchoTile, buffer_flits=guard_flits, cycles=slow_cycles),
          service=credits, credits=queue_flits)
    d.add("credits", CreditQueuesTile, at=credits, sources=[(3, 0), (3, 2)],
          buffer_flits=queue_flits)
    d.route("udp_rx", "fast", key=FAST_PORT)
    d.route("udp_rx", "slow", key=SLOW_PORT)
    for app in ("fast", "slow"):
        d.route(app, "credits")
        d.route("credits", app, key="credit")
    d.route("credits", "udp_tx")
    return d
