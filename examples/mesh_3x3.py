"""A 3×3 mesh with a :class:`~apiary.tiles.PortTile` at every position.

Each tile's NoC port is brought out of the design as ``port_<x>_<y>_tx`` (messages in, with the
sender writing the whole header) and ``port_<x>_<y>_rx`` (messages the mesh delivers), so a
test bench or off-mesh logic can drive any router. No routes are declared: the senders address
messages themselves. Generate Verilog for the 512-bit mesh with::

    apiary verilog examples/mesh_3x3.py -o mesh_3x3.v
    apiary verilog examples/mesh_3x3.py -o mesh_3x3_64.v --width 64
"""

from apiary.design import Design
from apiary.tiles import PortTile


def design(width=512):
    d = Design("mesh_3x3", cols=3, rows=3, width=width)
    for y in range(3):
        for x in range(3):
            d.add(f"port_{x}_{y}", PortTile, at=(x, y))
    return d
