"""Design: declaration, validation errors with locations, node tables, envs, tile construction."""

import sys

import pytest

from apiary.design import Design, DesignError, Route, TileDecl, _show_path
from apiary.noc.header import Fbits
from apiary.tile import Endpoint, Receive, Send, Tile, TileEnv
from apiary.tiles import ForwardTile, PortTile


def line_here(offset=0):
    """``file:line`` of the caller's line (plus ``offset``), as the design records it."""
    return f"{_show_path(__file__)}:{sys._getframe(1).f_lineno + offset}"


class CtlTile(ForwardTile):
    """Attaches to both planes (passing any message on the control plane too)."""
    planes = ("data", "ctl")
    inputs = (*ForwardTile.inputs, Receive("ctl_messages", plane="ctl", raw=True))
    outputs = (*ForwardTile.outputs, Send("ctl_forwarded", plane="ctl", raw=True))


class CtlOnly(Tile):
    planes = ("ctl",)

    def elaborate(self, platform):
        raise NotImplementedError


class Exploding(ForwardTile):
    def __init__(self, env=None, *, boom=False):
        if boom:
            raise ValueError("the boom parameter was set")
        super().__init__(env)


def problems(design):
    with pytest.raises(DesignError) as info:
        design.check()
    return info.value


# -- construction ----------------------------------------------------------------------------------

def test_design_attributes_and_defaults():
    d = Design("x", cols=3, rows=2)
    assert (d.name, d.cols, d.rows, d.width, d.ctl_width) == ("x", 3, 2, 512, 64)
    assert d.tiles == {} and d.routes == [] and d.settings == {}
    assert d.empty_positions() == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]


@pytest.mark.parametrize("kw, text", [
    ({"cols": 0, "rows": 1}, "cols must be an integer from 1 to 255, not 0"),
    ({"cols": 1, "rows": 256}, "rows must be an integer from 1 to 255, not 256"),
    ({"cols": 2.0, "rows": 1}, "cols must be an integer from 1 to 255, not 2.0"),
    ({"cols": True, "rows": 1}, "cols must be an integer"),
    ({"cols": 1, "rows": 1, "width": 100}, "data plane width must be one of 64, 128, 256, 512"),
    ({"cols": 1, "rows": 1, "ctl_width": 32}, "control plane width must be one of"),
])
def test_design_constructor_rejects(kw, text):
    where = line_here(2)
    with pytest.raises(DesignError) as info:
        Design("bad", **kw)
    assert text in str(info.value)
    assert f"({where})" in str(info.value)


def test_add_records_declaration_and_returns_name():
    d = Design("x", cols=2, rows=1)
    name = d.add("a", ForwardTile, at=(1, 0)); where = line_here()   # noqa: E702
    assert name == "a"
    decl = d.tiles["a"]
    assert isinstance(decl, TileDecl)
    assert (decl.name, decl.cls, decl.params, decl.x, decl.y) == ("a", ForwardTile, {}, 1, 0)
    assert decl.where == where
    assert d.empty_positions() == [(0, 0)]


@pytest.mark.parametrize("name", ["udp-rx", "1st", "_hidden", "", 7])
def test_add_rejects_names_that_cannot_name_ports(name):
    d = Design("x", cols=2, rows=1)
    where = line_here(2)
    with pytest.raises(DesignError) as info:
        d.add(name, ForwardTile, at=(0, 0))
    assert str(info.value) == (f"tile name {name!r} ({where}) must be a Python identifier that "
                               f"does not start with '_' (letters, digits and underscores): it "
                               f"names the tile's ports at the top level.")


def test_add_keeps_params():
    d = Design("x", cols=2, rows=1)
    d.add("a", PortTile, at=(0, 0), route=True)
    assert d.tiles["a"].params == {"route": True}


@pytest.mark.parametrize("at", [(1,), (1, 2, 3), "ab", (1.0, 0), None, (True, 0)])
def test_add_rejects_bad_coordinates_at_once(at):
    d = Design("x", cols=2, rows=1)
    where = line_here(2)
    with pytest.raises(DesignError) as info:
        d.add("a", ForwardTile, at=at)
    assert f"tile 'a' ({where}): at= must be an (x, y) pair of integers" in str(info.value)


def test_route_records_where_and_defaults():
    d = Design("x", cols=2, rows=1)
    d.route("a", "b"); where = line_here()   # noqa: E702
    assert d.routes == [Route("a", "b", None, "data", Fbits.LOCAL0, where)]


def test_route_rejects_unhashable_key_and_non_name():
    d = Design("x", cols=2, rows=1)
    with pytest.raises(DesignError, match=r"key \[1\] cannot be a table key"):
        d.route("a", "b", key=[1])
    with pytest.raises(DesignError, match=r"routes name tiles by their name"):
        d.route("a", (1, 0))
    with pytest.raises(DesignError, match=r"fbits must be a 4-bit value"):
        d.route("a", "b", fbits=16)


def test_chain_routes_consecutive_tiles_with_keys():
    d = Design("x", cols=3, rows=1)
    d.chain("a", "b", "c", keys=[0x0800, 17], plane="ctl"); where = line_here()   # noqa: E702
    assert [(r.src, r.dst, r.key, r.plane, r.where) for r in d.routes] == [
        ("a", "b", 0x0800, "ctl", where), ("b", "c", 17, "ctl", where)]


def test_chain_rejects_wrong_number_of_keys():
    d = Design("x", cols=3, rows=1)
    with pytest.raises(DesignError, match=r"chain a → b → c .* has 2 hops but 1 keys"):
        d.chain("a", "b", "c", keys=[1])
    with pytest.raises(DesignError, match=r"needs at least two tiles"):
        d.chain("a")


# -- validation: every problem named, with its line ------------------------------------------------

def test_duplicate_tile_name():
    d = Design("x", cols=3, rows=1)
    d.add("a", ForwardTile, at=(0, 0)); first = line_here()   # noqa: E702
    d.add("a", ForwardTile, at=(1, 0)); second = line_here()   # noqa: E702
    err = problems(d)
    assert (f"tile name 'a' is declared twice: at {first} and again at {second}; tile names "
            f"must be unique.") in str(err)
    assert d.tiles["a"].x == 0      # the first declaration stands


def test_not_a_tile_class():
    d = Design("x", cols=2, rows=1)
    d.add("a", dict, at=(0, 0)); where = line_here()   # noqa: E702
    d.add("b", ForwardTile(), at=(1, 0))
    err = str(problems(d))
    assert f"tile 'a' ({where}): <class 'dict'> is not a tile class" in err
    assert "tile 'b'" in err
    assert "is not a tile class; a tile class derives from apiary.tile.Tile" in err


def test_unknown_constructor_parameter():
    d = Design("x", cols=2, rows=1)
    d.add("a", ForwardTile, at=(0, 0), depth=4); where = line_here()   # noqa: E702
    err = str(problems(d))
    assert (f"tile 'a' (ForwardTile, {where}): ForwardTile(env=None, *, msg_type=None) cannot "
            f"take the parameters given (depth=4)") in err


def test_two_tiles_on_one_coordinate():
    d = Design("x", cols=2, rows=2)
    d.add("a", ForwardTile, at=(1, 1)); wa = line_here()   # noqa: E702
    d.add("b", PortTile, at=(1, 1)); wb = line_here()   # noqa: E702
    d.add("c", ForwardTile, at=(0, 0))
    err = problems(d)
    assert str(err) == (f"design 'x': tiles 'a' (ForwardTile, {wa}) and 'b' (PortTile, {wb}) "
                        f"are both placed at (1,1); a mesh position holds one tile.")
    assert err.problems == [str(err)[len("design 'x': "):]]


def test_three_tiles_on_one_coordinate():
    d = Design("x", cols=2, rows=2)
    for name in "abc":
        d.add(name, ForwardTile, at=(0, 1))
    assert "tiles 'a' (ForwardTile, " in str(problems(d))
    assert "and 'c' (ForwardTile, " in str(problems(d))
    assert "are all placed at (0,1)" in str(problems(d))


def test_coordinate_outside_mesh_names_mesh_size():
    d = Design("x", cols=4, rows=1)
    d.add("far", ForwardTile, at=(4, 0)); where = line_here()   # noqa: E702
    d.add("neg", ForwardTile, at=(0, -1)); where2 = line_here()   # noqa: E702
    err = str(problems(d))
    assert (f"tile 'far' (ForwardTile, {where}) is placed at (4,0), outside the 4×1 mesh: "
            f"x must be 0 to 3 and y must be 0.") in err
    assert f"tile 'neg' (ForwardTile, {where2}) is placed at (0,-1), outside the 4×1 mesh" in err


def test_dangling_route_suggests_a_name():
    d = Design("x", cols=2, rows=1)
    d.add("eth", ForwardTile, at=(0, 0))
    d.add("ip", ForwardTile, at=(1, 0))
    d.route("eth", "ipp"); where = line_here()   # noqa: E702
    d.route("nobody", "ip", key=17); where2 = line_here()   # noqa: E702
    err = str(problems(d))
    assert (f"route eth → ipp ({where}) names tile 'ipp', which is not declared "
            f"(did you mean 'ip'?).") in err
    assert (f"route nobody → ip [key 17] ({where2}) names tile 'nobody', which is not "
            f"declared.") in err


def test_unknown_plane():
    d = Design("x", cols=2, rows=1)
    d.add("a", ForwardTile, at=(0, 0))
    d.add("b", ForwardTile, at=(1, 0))
    d.route("a", "b", plane="control"); where = line_here()   # noqa: E702
    err = str(problems(d))
    assert f"route a → b ({where}) uses plane 'control'; the planes are 'data' and 'ctl'." in err


def test_plane_the_tile_does_not_attach_to():
    d = Design("x", cols=3, rows=1)
    d.add("a", CtlTile, at=(0, 0))
    d.add("b", ForwardTile, at=(1, 0)); wb = line_here()   # noqa: E702
    d.add("c", CtlOnly, at=(2, 0)); wc = line_here()   # noqa: E702
    d.route("a", "b", plane="ctl"); wr = line_here()   # noqa: E702
    d.route("a", "c"); wr2 = line_here()   # noqa: E702
    err = str(problems(d))
    assert (f"route a → b ({wr}) is on plane 'ctl', but tile 'b' (ForwardTile, {wb}) does not "
            f"attach to it (ForwardTile.planes is ('data',)).") in err
    assert (f"route a → c ({wr2}) is on plane 'data', but tile 'c' (CtlOnly, {wc}) does not "
            f"attach to it (CtlOnly.planes is ('ctl',)).") in err


def test_route_declared_twice():
    d = Design("x", cols=2, rows=1)
    d.add("a", ForwardTile, at=(0, 0))
    d.add("b", ForwardTile, at=(1, 0))
    d.route("a", "b", key=6); w1 = line_here()   # noqa: E702
    d.route("a", "b", key=6); w2 = line_here()   # noqa: E702
    err = str(problems(d))
    assert f"route a → b [key 6, plane 'data'] is declared twice: at {w1} and again at {w2}." in err


def test_every_problem_is_listed_and_numbered():
    d = Design("x", cols=2, rows=1)
    d.add("a", ForwardTile, at=(0, 0))
    d.add("b", ForwardTile, at=(0, 0))
    d.add("c", ForwardTile, at=(5, 5))
    d.route("a", "zz")
    err = problems(d)
    assert len(err.problems) == 3
    text = str(err)
    assert text.startswith("design 'x' has 3 problems:\n  1. ")
    assert "\n  2. " in text and "\n  3. " in text
    assert err.graph is not None and err.graph.structural_problems == err.problems


def test_structural_problems_skip_the_deadlock_check():
    d = Design("x", cols=2, rows=1)
    d.add("a", ForwardTile, at=(0, 0))
    d.add("b", ForwardTile, at=(0, 0))
    d.chain("a", "b", "a")
    err = problems(d)
    assert not any("deadlock" in p for p in err.problems)


# -- node tables, envs, building -----------------------------------------------------------------

def test_env_fills_node_table_from_routes():
    d = Design("x", cols=3, rows=2, width=128, ctl_width=64)
    d.settings["mac"] = 0x0200_0000_0001
    d.add("ip", CtlTile, at=(0, 0))
    d.add("udp0", CtlTile, at=(1, 0))
    d.add("udp1", CtlTile, at=(2, 0))
    d.add("tcp", CtlTile, at=(1, 1))
    d.route("ip", "udp0", key=17)
    d.route("ip", "udp1", key=17)           # a replica under the same key
    d.route("ip", "tcp", key=6, fbits=Fbits.LOCAL1)
    d.route("ip", "tcp", plane="ctl")
    env = d.env("ip")
    assert isinstance(env, TileEnv)
    assert (env.name, env.x, env.y, env.width, env.ctl_width) == ("ip", 0, 0, 128, 64)
    assert env.routes == {
        "data": {17: [Endpoint("udp0", 1, 0, Fbits.LOCAL0), Endpoint("udp1", 2, 0, Fbits.LOCAL0)],
                 6: [Endpoint("tcp", 1, 1, Fbits.LOCAL1)]},
        "ctl": {None: [Endpoint("tcp", 1, 1, Fbits.LOCAL0)]},
    }
    assert env.settings == {"mac": 0x0200_0000_0001}
    assert d.env("tcp").routes == {}
    assert d.check().node_tables["ip"] == env.routes
    with pytest.raises(DesignError, match="has no tile 'nope'"):
        d.env("nope")


def test_build_tiles_constructs_every_tile_with_its_env():
    d = Design("x", cols=2, rows=1, width=64)
    d.add("a", PortTile, at=(0, 0), route=True)
    d.add("b", ForwardTile, at=(1, 0))
    d.route("a", "b")
    tiles = d.build_tiles()
    assert list(tiles) == ["a", "b"]
    assert isinstance(tiles["a"], PortTile) and tiles["a"].env.name == "a"
    assert tiles["a"].env.routes["data"][None] == [Endpoint("b", 1, 0, Fbits.LOCAL0)]
    assert tiles["b"].env.width == 64


def test_build_tiles_names_the_tile_whose_constructor_failed():
    d = Design("x", cols=3, rows=1)
    d.add("ok", Exploding, at=(0, 0))
    d.add("bad", Exploding, at=(1, 0), boom=True); where = line_here()   # noqa: E702
    d.add("port", PortTile, at=(2, 0), route=True); where2 = line_here()   # noqa: E702
    with pytest.raises(DesignError) as info:
        d.build_tiles()
    text = str(info.value)
    assert (f"tile 'bad' (Exploding, {where}) could not be built: ValueError: the boom "
            f"parameter was set") in text
    assert f"tile 'port' (PortTile, {where2}) could not be built: ValueError: PortTile 'port' " \
           f"has route=True but not exactly one next hop" in text


def test_build_tiles_refuses_a_design_with_structural_problems():
    d = Design("x", cols=1, rows=1)
    d.add("a", ForwardTile, at=(3, 3))
    with pytest.raises(DesignError, match=r"outside the 1×1 mesh"):
        d.build_tiles()


def test_check_returns_the_graph():
    d = Design("x", cols=2, rows=2)
    d.add("a", ForwardTile, at=(0, 0))
    d.add("b", ForwardTile, at=(1, 1))
    d.route("a", "b")
    graph = d.check()
    assert graph.ok and graph.problems == [] and graph.cycles == []
    assert graph.empty_positions == [(1, 0), (0, 1)]
