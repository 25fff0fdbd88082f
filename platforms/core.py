"""The design as a Verilog core: what every platform flow instantiates.

:func:`core_info` checks and elaborates a :class:`~apiary.design.Design` with the MAC edge the
platform asks for (:class:`~apiary.stream.mac.MacOptions`), writes its Verilog (through the
conversion cache, so a second build of the same design does not convert again) and describes its
top-level ports as the top level itself lists them: the MAC ports, the memory ports (found by
their signature), the counter bank and the controller's bus port.
"""

import os
from dataclasses import dataclass

from amaranth.lib import wiring

from apiary.control.addrmap import DesignMap
from apiary.counters import CounterBank
from apiary.os.memory import MemoryPortSignature
from apiary.stream.mac import MacOptions
from apiary.top import DesignTop, MacPortInfo, design_verilog, top_name


__all__ = ["CoreInfo", "core_info", "write_core", "is_memory_port", "is_bridge_port", "CACHE_DIR"]

#: Where converted Verilog is kept between runs (shared with the Verilator back end).
CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "apiary", "verilator")


@dataclass
class CoreInfo:
    name: str                   # the design's name
    top_name: str               # its Verilog module
    width: int                  # data NoC width
    verilog_path: str
    signature: wiring.Signature
    mac: MacOptions             # how its MAC edges were built
    mac_ports: list[MacPortInfo]
    memory_ports: dict          # {top-level member: (data_width, word address width)}
    counters: CounterBank
    bridge: str | None = None   # the controller's bus port (a top-level member), if it has one
    control_map: DesignMap | None = None


def is_bridge_port(member) -> bool:
    """Whether a top-level member is the controller's bus port
    (:data:`beehive.apps.controller.BRIDGE`, ``ControllerTile(bridge=True)``)."""
    from beehive.apps.controller import BRIDGE
    return member.is_signature and member.flow == wiring.In and member.signature.flip() is BRIDGE


def is_memory_port(member) -> bool:
    """Whether a top-level member is a memory port (:mod:`apiary.os.memory`), master side."""
    return (member.is_signature and member.flow == wiring.Out
            and isinstance(member.signature, MemoryPortSignature))


def memory_ports(design) -> list[str]:
    """The names of ``design``'s memory ports (its top's, without elaborating it)."""
    return [k for k, m in DesignTop(design).signature.members.items() if is_memory_port(m)]


def core_info(design, out_dir, *, mac: MacOptions = MacOptions(), cache_dir=CACHE_DIR) -> CoreInfo:
    """Elaborate ``design`` with ``mac``, write ``<out_dir>/<top>.v`` and describe it."""
    return write_core(DesignTop(design, mac=mac), out_dir, cache_dir=cache_dir)


def write_core(top: DesignTop, out_dir, *, cache_dir=CACHE_DIR) -> CoreInfo:
    """Write an elaborated top's Verilog as ``<out_dir>/<top>.v`` and describe it (for a flow
    that checks the top before anything is written)."""
    design = top.design
    text = design_verilog(top, cache_dir)
    os.makedirs(out_dir, exist_ok=True)
    name = top_name(design)
    path = os.path.join(out_dir, f"{name}.v")
    with open(path, "w") as f:
        f.write(text)
    memory = {k: (m.signature.data_width, m.signature.addr_width)
              for k, m in top.signature.members.items() if is_memory_port(m)}
    bridge = next((k for k, m in top.signature.members.items() if is_bridge_port(m)), None)
    return CoreInfo(name=design.name, top_name=name, width=design.width, verilog_path=path,
                    signature=top.signature, mac=top.mac, mac_ports=top.mac_ports,
                    memory_ports=memory, counters=top.bank, bridge=bridge,
                    control_map=top.control_map)
