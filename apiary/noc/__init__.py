"""The network-on-chip: the message header, flit streams, router, mesh and tile-side helpers.

Built on :mod:`apiary.stream`. Nothing here knows about Ethernet or any other protocol: message
types are registered by the packages that define them (:mod:`apiary.noc.msgtype`).
"""

from .header import (Fbits, NocHeader, Message, ROUTING_BITS, noc_header, routing_header,
                     header_flits, field_location)
from .flit import flit_layout, flit_signature
from .framing import MessageSender, MessageReceiver
from .msgtype import UNTYPED, register_msg_types, msg_type_name
from .splitter import FbitsSplitter
from .merger import MessageMerger
from .nexthop import Endpoint, NextHopTable
from .rewrite import HeaderRewriter

__all__ = ["Fbits", "NocHeader", "Message", "ROUTING_BITS", "noc_header", "routing_header",
           "header_flits", "field_location", "flit_layout", "flit_signature", "MessageSender",
           "MessageReceiver", "UNTYPED", "register_msg_types", "msg_type_name", "FbitsSplitter",
           "MessageMerger", "Endpoint", "NextHopTable", "HeaderRewriter"]
