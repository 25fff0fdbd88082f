"""The design's own addresses: its MAC and IPv4 address, from the design's settings.

Every tile that needs them (Ethernet RX and TX, ARP, IPv4 RX) reads ``settings["mac"]`` and
``settings["ipv4"]`` of its env through :func:`local_addresses`; benchmarks and board flows read
them from the design with :func:`design_addresses`.
"""

import ipaddress


__all__ = ["DEFAULT_MAC", "DEFAULT_IPV4", "mac_to_int", "ipv4_to_int", "int_to_mac",
           "int_to_ipv4", "local_addresses", "design_addresses"]


DEFAULT_MAC = "02:00:00:00:00:02"
DEFAULT_IPV4 = "10.0.0.2"


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
