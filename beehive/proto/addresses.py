"""The design's own addresses: its MAC and IPv4 address, netmask and gateway, from the
design's settings, fixed when it is built or changed while it runs.

Every tile that needs them (Ethernet RX and TX, ARP, IPv4 RX, TCP TX) reads ``settings["mac"]``
and ``settings["ipv4"]`` of its env through :func:`local_addresses`; benchmarks and board flows
read them from the design with :func:`design_addresses`. ``settings["netmask"]`` and
``settings["gateway"]`` tell the ARP tile which addresses it resolves through the gateway
(default ``0.0.0.0`` both: every address is on the link, and there is no gateway).

**At run time** (``settings["runtime_addresses"] = True``): the four live in the ARP tile's
control registers (``arp.mac``, ``arp.ipv4``, ``arp.netmask``, ``arp.gateway``; reset values from
the settings), which ``apiary ctl`` reads and writes, and reach the other tiles on dedicated
wires (:class:`AddressesSignature`, member ``addresses``), which the design joins by itself
from the ARP tile to every tile that takes them (broadcast wires, :class:`~apiary.tile.
WiresSignature`).
Every comparison and header uses the registers, so a new address takes effect in the cycle it
is written; the ARP tile announces it (gratuitous ARP). A tile reads its addresses with
:func:`tile_addresses`, whichever way the design was built.

**From DHCP** (``settings["runtime_addresses"] = "dhcp"``): a
:class:`~beehive.apps.dhcp.DhcpClientTile` drives the wires instead (its register ``mac``, and
the lease: IPv4 address 0 until it has one), and the ARP tile takes them like the others.
"""

import ipaddress
from typing import Any

from amaranth.lib.wiring import In, Out

from apiary.stream.registers import Register
from apiary.tile import WiresSignature


__all__ = ["DEFAULT_MAC", "DEFAULT_IPV4", "RUNTIME_SETTING", "mac_to_int", "ipv4_to_int",
           "int_to_mac", "int_to_ipv4", "local_addresses", "design_addresses", "netmask_gateway",
           "runtime_addresses", "address_source", "AddressesSignature", "address_members",
           "address_registers", "tile_addresses"]


DEFAULT_MAC = "02:00:00:00:00:02"
DEFAULT_IPV4 = "10.0.0.2"
#: The design setting that puts the addresses in control registers.
RUNTIME_SETTING = "runtime_addresses"


def mac_to_int(text):
    """``"02:00:00:00:00:02"`` → ``0x020000000002``; raises :class:`ValueError` naming the text."""
    parts = str(text).replace("-", ":").split(":")
    try:
        if len(parts) != 6 or not all(1 <= len(p) <= 2 for p in parts):
            raise ValueError
        return int("".join(p.zfill(2) for p in parts), 16)
    except ValueError:
        raise ValueError(f"{text!r} is not a MAC address (six hex bytes such as "
                         f"{DEFAULT_MAC})") from None


def int_to_mac(value):
    return ":".join(f"{(value >> (8 * k)) & 0xFF:02x}" for k in reversed(range(6)))


def ipv4_to_int(text):
    """``"10.0.0.2"`` → ``0x0A000002``; raises :class:`ValueError` naming the text."""
    try:
        return int(ipaddress.IPv4Address(str(text)))
    except ValueError:
        raise ValueError(f"{text!r} is not an IPv4 address (such as {DEFAULT_IPV4})") from None


def int_to_ipv4(value):
    return str(ipaddress.IPv4Address(value))


def local_addresses(env):
    """``(mac, ipv4)`` as integers from the ``settings`` (``"mac"``, ``"ipv4"``) of a tile's
    env or of a design, defaulting to :data:`DEFAULT_MAC` and :data:`DEFAULT_IPV4`."""
    settings = env.settings
    return (mac_to_int(settings.get("mac", DEFAULT_MAC)),
            ipv4_to_int(settings.get("ipv4", DEFAULT_IPV4)))


def design_addresses(design):
    """``(mac, ipv4)`` of a design as text (``"02:00:00:00:00:02"``, ``"10.0.0.2"``), from its
    settings; raises :class:`ValueError` naming a malformed one."""
    mac, ipv4 = local_addresses(design)
    return int_to_mac(mac), int_to_ipv4(ipv4)


def netmask_gateway(env: Any) -> tuple[int, int]:
    """``(netmask, gateway)`` as integers from the settings (``"netmask"``, ``"gateway"``,
    default ``0.0.0.0``: everything on the link, no gateway); raises :class:`ValueError` naming
    a netmask that is not one run of ones, or a malformed address."""
    settings = env.settings
    mask = ipv4_to_int(settings.get("netmask", "0.0.0.0"))
    host = ~mask & 0xFFFF_FFFF
    if host & (host + 1):
        raise ValueError(f"netmask {settings.get('netmask')!r} is not a run of ones followed by "
                         f"zeros (such as 255.255.255.0)")
    return mask, ipv4_to_int(settings.get("gateway", "0.0.0.0"))


def address_source(env: Any) -> str | None:
    """Where the design's addresses come from at run time (``settings["runtime_addresses"]``):
    ``"registers"`` (``True``: the ARP tile's), ``"dhcp"`` (a DHCP client tile), or ``None``
    (fixed when the design is built); raises :class:`ValueError` naming another value."""
    value = env.settings.get(RUNTIME_SETTING, False) if env is not None else False
    if value is True:
        return "registers"
    if value == "dhcp":
        return "dhcp"
    if value is False or value is None:
        return None
    raise ValueError(f"settings['runtime_addresses'] is True (the ARP tile's registers), "
                     f"'dhcp' (a DHCP client tile) or False, not {value!r}")


def runtime_addresses(env: Any) -> bool:
    """Whether the design's addresses change at run time (:func:`address_source`)."""
    return address_source(env) is not None


class AddressesSignature(WiresSignature):
    """The design's addresses as the ARP tile's registers hold them (``Out`` on the ARP tile,
    ``In`` on every tile that reads them), joined by the design without ``Design.wire``."""

    broadcast = True

    def __init__(self) -> None:
        super().__init__({"mac": Out(48), "ipv4": Out(32), "netmask": Out(32),
                          "gateway": Out(32)})


def address_members(env: Any) -> dict[str, Any]:
    """The member a tile that reads the addresses adds at run time: ``{"addresses":
    In(AddressesSignature())}``, else nothing."""
    return {"addresses": In(AddressesSignature())} if runtime_addresses(env) else {}


def address_registers(env: Any) -> dict[str, Register]:
    """The ARP tile's registers at run time, at their reset values from the settings."""
    mac, ipv4 = local_addresses(env)
    mask, gateway = netmask_gateway(env)
    return {
        "mac": Register(48, "the design's MAC address", mac),
        "ipv4": Register(32, "the design's IPv4 address", ipv4),
        "netmask": Register(32, "the netmask: addresses outside it are resolved through the "
                                "gateway", mask),
        "gateway": Register(32, "the gateway (0: none, every address is resolved itself)",
                            gateway),
    }


def tile_addresses(tile: Any) -> tuple[Any, Any]:
    """``(mac, ipv4)`` for a tile's logic: its ``addresses`` wires at run time, else the
    settings' integers."""
    if runtime_addresses(tile.env):
        return tile.addresses.mac, tile.addresses.ipv4
    return local_addresses(tile.env)

