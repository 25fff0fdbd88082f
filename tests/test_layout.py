"""The layout graph: XY paths, the resource-dependency graph and the message-level deadlock
check."""

import itertools
import pathlib
import sys

import pytest

from apiary.design import Design, DesignError, _show_path
from apiary.layout import Link, Port, strongly_connected, xy_path, xy_step
from apiary.load import load_design
from apiary.tile import Receive, Send
from apiary.tiles import ForwardTile, PortTile

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def line_here(offset=0):
    return f"{_show_path(__file__)}:{sys._getframe(1).f_lineno + offset}"


class Buffering(ForwardTile):
    """Stores whole messages: holds no input while it waits for its output."""
    streaming = False


class Both(ForwardTile):
    """On both planes, passing any message on the control plane too (a stand-in)."""
    planes = ("data", "ctl")
    inputs = (*ForwardTile.inputs, Receive("ctl_messages", plane="ctl", raw=True))
    outputs = (*ForwardTile.outputs, Send("ctl_forwarded", plane="ctl", raw=True))


# -- XY paths --------------------------------------------------------------------------------------

def test_xy_path_goes_x_first_then_y():
    assert xy_path((0, 0), (0, 0)) == []
    assert xy_path((0, 0), (2, 1)) == [(0, 0, "E"), (1, 0, "E"), (2, 0, "S")]
    assert xy_path((2, 2), (0, 0)) == [(2, 2, "W"), (1, 2, "W"), (0, 2, "N"), (0, 1, "N")]
    assert xy_path((1, 3), (1, 1)) == [(1, 3, "N"), (1, 2, "N")]
    assert xy_path((3, 0), (0, 2)) == [(3, 0, "W"), (2, 0, "W"), (1, 0, "W"), (0, 0, "S"),
                                       (0, 1, "S")]
    assert xy_step((1, 1), (1, 1)) is None


def test_xy_path_matches_the_router_model():
    from apiary.noc.router import Dir, xy_route
    for src, dst in itertools.product(itertools.product(range(4), range(3)), repeat=2):
        at, came, hops = src, Dir.P, []
        while True:
            out = xy_route(at[0], at[1], dst[0], dst[1], came)
            if out == Dir.P:
                break
            hops.append((at[0], at[1], out.name))
            step = {"N": (0, -1), "E": (1, 0), "S": (0, 1), "W": (-1, 0)}[out.name]
            at = (at[0] + step[0], at[1] + step[1])
            came = {"N": Dir.S, "S": Dir.N, "E": Dir.W, "W": Dir.E}[out.name]
        assert xy_path(src, dst) == hops, (src, dst)


def test_graph_exposes_paths_per_route():
    d = Design("x", cols=3, rows=2)
    d.add("a", ForwardTile, at=(0, 0))
    d.add("b", Both, at=(2, 1))
    d.add("c", Both, at=(0, 1))
    d.route("a", "b")
    d.route("b", "c", plane="ctl")
    g = d.check()
    r_ab, r_bc = d.routes
    assert g.paths[r_ab] == [Link("data", 0, 0, "E"), Link("data", 1, 0, "E"),
                             Link("data", 2, 0, "S")]
    assert g.path(r_bc) == [Link("ctl", 2, 1, "W"), Link("ctl", 1, 1, "W")]
    assert str(g.paths[r_ab][2]) == "link (2,0)→S" and g.paths[r_ab][2].to == (2, 1)


def test_dependency_graph_per_plane():
    d = load_design(str(EXAMPLES / "deadlock_fig5b.py"))
    g = d.check()
    data = g.dependency_graph("data")
    P = lambda t, s: Port("data", t, s)          # noqa: E731
    L = lambda x, y, dr: Link("data", x, y, dr)  # noqa: E731
    assert data == {
        P("eth", "out"): [L(0, 0, "E")], L(0, 0, "E"): [P("ip", "in")],
        P("ip", "in"): [P("ip", "out")], P("ip", "out"): [L(1, 0, "E")],
        L(1, 0, "E"): [P("udp", "in")], P("udp", "in"): [P("udp", "out")],
        P("udp", "out"): [L(2, 0, "E")], L(2, 0, "E"): [P("app", "in")], P("app", "in"): [],
    }
    assert g.dependency_graph("ctl") == {}


def test_strongly_connected():
    succ = {1: [2], 2: [3], 3: [1, 4], 4: [5], 5: [4], 6: [6], 7: []}
    comps = sorted(sorted(c) for c in strongly_connected(succ))
    assert comps == [[1, 2, 3], [4, 5], [6], [7]]
    # deep chains need no recursion
    n = 20000
    chain = {i: [i + 1] for i in range(n)}
    chain[n] = [0]
    assert len(strongly_connected(chain)) == 1


# -- the paper's Fig. 5 --------------------------------------------------------------------------

FIG5A_CYCLE = ("udp.out → link (1,0)→E → ip.in → ip.out → link (2,0)→W → udp.in → udp.out")


def example_line(name, needle):
    """``file:line`` of the first line of ``examples/<name>.py`` that contains ``needle``."""
    path = EXAMPLES / f"{name}.py"
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return f"{_show_path(str(path))}:{n}"
    raise AssertionError(f"{needle!r} not in {path}")


def test_fig5a_deadlocks_with_the_exact_cycle():
    d = load_design(str(EXAMPLES / "deadlock_fig5a.py"))
    with pytest.raises(DesignError) as info:
        d.check()
    err = info.value
    assert len(err.problems) == 1
    text = str(err)
    at = lambda needle: example_line("deadlock_fig5a", needle)   # noqa: E731
    eth_ip, ip_udp, udp_app = (at('d.route("eth", "ip"'), at('d.route("ip", "udp"'),
                               at('d.route("udp", "app"'))
    ip, udp = at('d.add("ip"'), at('d.add("udp"')
    assert text.split("\n")[:4] == [
        f"design 'fig5a': deadlock on plane 'data': {FIG5A_CYCLE}",
        f"    link (1,0)→E is wanted by route udp → app [key 7] ({udp_app}) while route "
        f"eth → ip [key 0x0800] ({eth_ip}) holds it.",
        f"    routes in the cycle: udp → app [key 7] ({udp_app}), eth → ip [key 0x0800] "
        f"({eth_ip}), ip → udp [key 17] ({ip_udp})",
        f"    streaming tiles in the cycle, each holding its input while it waits for its output: "
        f"'ip' (ForwardTile, {ip}) and 'udp' (ForwardTile, {udp}).",
    ]
    g = err.graph
    (cycle,) = g.cycles
    assert [str(r) for r in cycle.resources] == [
        "udp.out", "link (1,0)→E", "ip.in", "ip.out", "link (2,0)→W", "udp.in"]
    assert cycle.links == [Link("data", 1, 0, "E"), Link("data", 2, 0, "W")]
    assert cycle.tiles == ["udp", "ip"]
    assert cycle.planes == ["data"]
    assert sorted((r.src, r.dst) for r in cycle.routes) == [("eth", "ip"), ("ip", "udp"),
                                                           ("udp", "app")]


def test_fig5b_has_no_deadlock():
    d = load_design(str(EXAMPLES / "deadlock_fig5b.py"))
    g = d.check()
    assert g.cycles == [] and g.ok
    assert "no deadlock" in g.summary()


@pytest.mark.parametrize("width", [64, 512])
def test_fig5_examples_take_a_width(width):
    for name in ("deadlock_fig5a", "deadlock_fig5b", "mesh_3x3"):
        assert load_design(str(EXAMPLES / f"{name}.py"), width=width).width == width


def test_fig5a_reports_the_line_of_each_route():
    d = Design("fig5a_lines", cols=4, rows=1)
    d.add("eth", PortTile, at=(0, 0), route=True)
    d.add("udp", ForwardTile, at=(1, 0)); w_udp = line_here()   # noqa: E702
    d.add("ip", ForwardTile, at=(2, 0)); w_ip = line_here()   # noqa: E702
    d.add("app", PortTile, at=(3, 0))
    d.route("eth", "ip", key=0x0800); w1 = line_here()   # noqa: E702
    d.route("ip", "udp", key=17); w2 = line_here()   # noqa: E702
    d.route("udp", "app", key=7); w3 = line_here()   # noqa: E702
    text = str(pytest.raises(DesignError, d.check).value)
    assert (f"link (1,0)→E is wanted by route udp → app [key 7] ({w3}) while route "
            f"eth → ip [key 0x0800] ({w1}) holds it.") in text
    assert (f"routes in the cycle: udp → app [key 7] ({w3}), eth → ip [key 0x0800] ({w1}), "
            f"ip → udp [key 17] ({w2})") in text
    assert f"'ip' (ForwardTile, {w_ip}) and 'udp' (ForwardTile, {w_udp})" in text


# -- other cycles ----------------------------------------------------------------------------------

def ring(cls=ForwardTile, **kw):
    d = Design("ring", cols=2, rows=2)
    for name, at in (("a", (0, 0)), ("b", (1, 0)), ("c", (1, 1)), ("d", (0, 1))):
        d.add(name, kw.get(name, cls), at=at)
    d.chain("a", "b", "c", "d", "a")
    return d


def test_ring_of_streaming_tiles_deadlocks():
    err = pytest.raises(DesignError, ring().check).value
    (cycle,) = err.graph.cycles
    assert str(err).startswith(
        "design 'ring': deadlock on plane 'data': a.out → link (0,0)→E → b.in → b.out → "
        "link (1,0)→S → c.in → c.out → link (1,1)→W → d.in → d.out → link (0,1)→N → a.in → a.out")
    assert set(cycle.tiles) == {"a", "b", "c", "d"}


def test_one_non_streaming_tile_breaks_the_ring():
    assert ring(c=Buffering).check().cycles == []


def test_non_streaming_tile_breaks_fig5a():
    d = Design("fig5a_buffered", cols=4, rows=1)
    d.add("eth", PortTile, at=(0, 0), route=True)
    d.add("udp", Buffering, at=(1, 0))
    d.add("ip", ForwardTile, at=(2, 0))
    d.add("app", PortTile, at=(3, 0))
    d.chain("eth", "ip", "udp", "app")
    assert d.check().ok


def test_planes_are_independent():
    # Fig. 5a's layout, but the hop that re-acquires the link runs on the control plane.
    d = Design("split", cols=4, rows=1)
    d.add("eth", Both, at=(0, 0))
    d.add("udp", Both, at=(1, 0))
    d.add("ip", Both, at=(2, 0))
    d.add("app", Both, at=(3, 0))
    d.route("eth", "ip")
    d.route("ip", "udp")
    d.route("udp", "app", plane="ctl")
    assert d.check().ok
    # A cycle on the data plane is reported for the data plane only.
    d.route("ip", "eth", plane="ctl")
    d.route("udp", "ip")
    err = pytest.raises(DesignError, d.check).value
    assert len(err.graph.cycles) == 1
    assert "deadlock on plane 'data'" in str(err)
    assert "'ctl'" not in str(err).split("\n")[0]
    assert all(r.plane == "data" for r in err.graph.cycles[0].resources)


def test_cycle_on_ctl_plane_is_named_ctl():
    d = Design("ctl_ring", cols=2, rows=1)
    d.add("a", Both, at=(0, 0))
    d.add("b", Both, at=(1, 0))
    d.chain("a", "b", "a", plane="ctl")
    d.chain("a", "b")
    text = str(pytest.raises(DesignError, d.check).value)
    assert text.startswith("design 'ctl_ring': deadlock on plane 'ctl': a.out → link (0,0)→E → "
                           "b.in → b.out → link (1,0)→W → a.in → a.out")
    assert "plane 'data'" not in text


def test_two_separate_cycles_are_both_reported():
    d = Design("two", cols=4, rows=1)
    for i, name in enumerate("abcd"):
        d.add(name, ForwardTile, at=(i, 0))
    d.chain("a", "b", "a")
    d.chain("c", "d", "c")
    err = pytest.raises(DesignError, d.check).value
    assert len(err.graph.cycles) == 2
    assert str(err).startswith("design 'two' has 2 problems:\n  1. deadlock on plane 'data': a.out")
    assert "\n  2. deadlock on plane 'data': c.out" in str(err)


def test_tile_sending_to_itself_deadlocks_when_streaming():
    d = Design("self", cols=1, rows=1)
    d.add("a", ForwardTile, at=(0, 0))
    d.route("a", "a")
    assert "deadlock on plane 'data': a.out → a.in → a.out" in str(
        pytest.raises(DesignError, d.check).value)
    d2 = Design("self2", cols=1, rows=1)
    d2.add("a", Buffering, at=(0, 0))
    d2.route("a", "a")
    assert d2.check().ok


def test_shared_link_without_a_cycle_is_fine():
    d = Design("share", cols=3, rows=2)
    d.add("a", ForwardTile, at=(0, 0))
    d.add("b", ForwardTile, at=(0, 1))
    d.add("c", ForwardTile, at=(2, 0))
    d.add("e", ForwardTile, at=(2, 1))
    d.route("a", "c")       # uses (0,0)→E, (1,0)→E
    d.route("a", "e")       # shares them, then turns south
    d.route("b", "e")
    assert d.check().ok


def test_knot_larger_than_the_cycle_is_summarised():
    d = Design("knot", cols=3, rows=1)
    for i, name in enumerate("abc"):
        d.add(name, ForwardTile, at=(i, 0))
    d.chain("a", "b", "a")
    d.chain("b", "c", "b")
    err = pytest.raises(DesignError, d.check).value
    assert len(err.graph.cycles) == 1
    assert "more resources are caught in the same knot" in str(err)


# -- depends (Beehive's depends_on) ----------------------------------------------------------------

def test_depends_makes_a_non_streaming_tile_wait():
    d = ring(c=Buffering)
    assert d.check().ok
    d.depends("c"); where = line_here()   # noqa: E702
    text = str(pytest.raises(DesignError, d.check).value)
    assert "deadlock on plane 'data'" in text
    assert f"'c' holds its input on 'data' while it waits for 'c' to send on 'data' " \
           f"(declared at {where})." in text


def test_depends_across_planes_joins_the_graphs():
    d = Design("cross", cols=2, rows=1)
    d.add("tcp", Both, at=(0, 0))
    d.add("mem", Both, at=(1, 0))
    d.route("mem", "tcp")                 # data: memory responses to tcp
    d.route("tcp", "mem", plane="ctl")    # ctl: tcp's requests to memory
    assert d.check().ok                   # separate planes: no cycle
    d.depends("tcp", plane="data", on_plane="ctl")
    d.depends("mem", plane="ctl", on_plane="data")
    text = str(pytest.raises(DesignError, d.check).value)
    assert "deadlock across planes 'ctl' and 'data': " in text
    assert "data:tcp.in → ctl:tcp.out" in text


def test_depends_checks_its_names():
    d = Design("x", cols=2, rows=1)
    d.add("a", ForwardTile, at=(0, 0))
    d.depends("a", on="zz"); where = line_here()   # noqa: E702
    d.depends("a", on_plane="ctl")
    text = str(pytest.raises(DesignError, d.check).value)
    assert f"dependency of 'a' on 'zz' ({where}) names tile 'zz', which is not declared." in text
    assert "tile 'a' (ForwardTile, " in text and "does not attach to plane 'ctl'." in text


def test_runtime_routes_keep_a_path_and_grant_nothing():
    """A path kept for run-time IPC is in the routers and the deadlock check, but in no
    next-hop table and no capability; a bad end is a problem naming the line."""
    from apiary.noc.router import Dir
    d = Design("rt", cols=3, rows=1, width=64)
    d.add("a", PortTile, at=(0, 0))
    d.add("b", PortTile, at=(2, 0))
    d.runtime_route("a", "b")
    g = d.check()
    paths = g.router_paths("data")
    assert paths[(0, 0)] == {(Dir.P, Dir.E)} and paths[(1, 0)] == {(Dir.W, Dir.E)}
    assert paths[(2, 0)] == {(Dir.W, Dir.P)}
    assert g.node_tables["a"] == {} and d.ipc_caps("b") == ([], [])
    d.runtime_route("a", "nope")
    with pytest.raises(DesignError, match=r"route a → nope .*test_layout.py:\d+.* names"):
        d.check()
