"""Which router inputs a message crosses on the mesh, XY routed: for tests that check a layout
keeps two routes' messages apart (a message blocked at the head of a router's input queue
blocks every message behind it)."""

from apiary.noc.router import OPPOSITE, Dir, xy_route

_STEP = {Dir.N: (0, -1), Dir.S: (0, 1), Dir.E: (1, 0), Dir.W: (-1, 0)}


def inputs_on_the_way(src, dst):
    """The ``((x, y), input)`` pairs a message from the tile at ``src`` to the tile at ``dst``
    enters after leaving its own router, XY routed, the destination's router included."""
    (x, y), came = src, Dir.P
    seen = []
    while True:
        out = xy_route(x, y, *dst, came_from=came)
        if out == Dir.P:
            return seen
        x, y = x + _STEP[out][0], y + _STEP[out][1]
        came = OPPOSITE[out]
        seen.append(((x, y), came))


def places(design):
    """``{tile: (x, y)}`` of a design."""
    return {name: (t.x, t.y) for name, t in design.tiles.items()}
