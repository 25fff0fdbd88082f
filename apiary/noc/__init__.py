"""The network-on-chip: header layouts, flit streams, router, mesh and tile-side helpers.

Nothing here knows about Ethernet or any other protocol.
"""

from .header import (Header, MsgType, Fbits, NocHeader, Message, ROUTING_BITS, SUPPORTED_WIDTHS,
                     noc_header, routing_header, header_flits, check_width, field_location)
from .flit import flit_layout, flit_signature, payload_layout, payload_signature
from .framing import MessageSender, MessageReceiver
from .splitter import FbitsSplitter
from .merger import MessageMerger
from .nexthop import NextHopTable
from .rewrite import HeaderRewriter
