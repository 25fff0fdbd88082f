"""Packet header fields in a word of byte lanes (byte ``i`` in bits ``8i`` to ``8i + 7``, as FLD's
streams carry packets): read as big-endian numbers, and numbers laid out as bytes."""

from typing import Any

from amaranth import Cat, Const, Module, Signal

from .formats import IP_OK, L4_OK


__all__ = ["field_of", "bytes_at", "lanes_of", "head_with_word", "udp_over_ipv4_to",
           "checksums_verified"]


def field_of(value: Any, first: int, n: int) -> Any:
    """Bytes ``first`` .. ``first + n - 1`` of ``value`` as a big-endian field: the first byte
    most significant."""
    return Cat(*(value[8 * (first + n - 1 - k):8 * (first + n - k)] for k in range(n)))


def bytes_at(value: Any, first: int, n: int) -> Any:
    """Bytes ``first`` .. ``first + n - 1`` of ``value`` as they lie (still in lane order)."""
    return value[8 * first:8 * (first + n)]


def lanes_of(number: int, n: int) -> Any:
    """``number`` as ``n`` bytes in lane order, big-endian (the first byte its most
    significant)."""
    return Const(int.from_bytes(number.to_bytes(n, "big"), "little"), 8 * n)


def head_with_word(m: Module, head: Any, index: Any, word: Any) -> Any:
    """The first ``len(head) // 8`` bytes of a packet (``head``, kept so far) with word number
    ``index`` of it, ``word``, in its place: a signal, for a decision in the cycle the word
    comes."""
    width = len(word)
    out = Signal(len(head))
    m.d.comb += out.eq(head)
    for k in range(-(-len(head) // width)):
        with m.If(index == k):
            lo, hi = k * width, min((k + 1) * width, len(head))
            m.d.comb += out[lo:hi].eq(word[:hi - lo])
    return out


def udp_over_ipv4_to(head: Any, ip: int) -> Any:
    """Whether the Ethernet frame whose first bytes are ``head`` is an IPv4 datagram without
    options, UDP, to ``ip``."""
    return ((field_of(head, 12, 2) == 0x0800) & (head[8 * 14:8 * 15] == 0x45)
            & (head[8 * 23:8 * 24] == 17) & (field_of(head, 30, 4) == ip))


def checksums_verified(checks: Any) -> Any:
    """Whether a completion's ``checks`` say the NIC verified both the IPv4 and the TCP or UDP
    checksum."""
    return (checks & (IP_OK | L4_OK)) == (IP_OK | L4_OK)
