"""The design as a Verilog core: what every platform flow instantiates.

:func:`core_info` checks and elaborates a :class:`~apiary.design.Design`, writes its Verilog
(through the conversion cache, so a second build of the same design does not convert again) and
describes its top-level ports: the Ethernet-facing payload streams, the memory ports, the
counters.
"""

import os
from dataclasses import dataclass, field

from amaranth.lib import wiring


__all__ = ["CoreInfo", "core_info", "is_memory_port", "CACHE_DIR"]

#: Where converted Verilog is kept between runs (shared with the Verilator back end).
CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "apiary", "verilator")


@dataclass
class CoreInfo:
    name: str                   # the design's name
    top_name: str               # its Verilog module
    width: int                  # data NoC width
    verilog_path: str
    signature: wiring.Signature
    frame_ports: list           # [apiary.sim.FramePort]
    memory_ports: dict          # {top-level member: (data_width, word address width)}
    counters: list = field(default_factory=list)


def is_memory_port(member):
    """Whether a top-level member is a memory port (``cmd``/``wdata``/``rdata`` streams, the
    signature of :mod:`apiary.os.memory`), seen from the master."""
    if not member.is_signature or member.flow != wiring.Out:
        return False
    members = member.signature.members
    return set(members.keys()) == {"cmd", "wdata", "rdata"}


def _memory_geometry(member):
    m = member.signature.members
    data = m["wdata"].signature.members["payload"].shape
    cmd = m["cmd"].signature.members["payload"].shape
    return data["data"].width, cmd["addr"].width


def core_info(design, out_dir, *, cache_dir=CACHE_DIR):
    """Elaborate ``design``, write ``<out_dir>/<top>.v`` and describe it."""
    from apiary.sim.core import find_ports, find_counters
    from apiary.top import DesignTop, design_verilog, top_name

    top = DesignTop(design)
    text = design_verilog(top, cache_dir)
    os.makedirs(out_dir, exist_ok=True)
    name = top_name(design)
    path = os.path.join(out_dir, f"{name}.v")
    with open(path, "w") as f:
        f.write(text)
    memory = {k: _memory_geometry(m) for k, m in top.signature.members.items()
              if is_memory_port(m)}
    return CoreInfo(name=design.name, top_name=name, width=design.width, verilog_path=path,
                    signature=top.signature, frame_ports=find_ports(top), memory_ports=memory,
                    counters=find_counters(top))
