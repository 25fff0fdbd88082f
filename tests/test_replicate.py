"""Design.replicate: copies, their routes and places, the deadlock check over the copies, and
one readable DesignError per bad call, naming its line."""

import pathlib
import sys

import pytest

from apiary.design import Design, DesignError, _show_path
from apiary.load import load_script
from apiary.tiles import ForwardTile, PortTile

ROOT = pathlib.Path(__file__).resolve().parents[1]
replicated_echo = load_script(ROOT / "examples" / "replicated_echo.py")


def line_here(offset=0):
    return f"{_show_path(__file__)}:{sys._getframe(1).f_lineno + offset}"


def row():
    """src (0,0) → a (1,0) → b (2,0) → sink (3,0), on a 4 × 2 mesh."""
    d = Design("row", cols=4, rows=2, width=64)
    d.add("src", PortTile, at=(0, 0))
    d.add("a", ForwardTile, at=(1, 0))
    d.add("b", ForwardTile, at=(2, 0))
    d.add("sink", PortTile, at=(3, 0))
    d.route("src", "a", key=5)
    d.route("a", "b")
    d.route("b", "sink")
    return d


def hops(design, name, key=None):
    return [ep.name for ep in design.node_table(name)["data"][key]]


def test_one_tile_into_copies_every_route_duplicated():
    d = row()
    names = d.replicate("a", n=3, at=[(1, 0), (1, 1), (0, 1)])
    assert names == ["a_0", "a_1", "a_2"]
    assert list(d.tiles) == ["src", "a_0", "a_1", "a_2", "b", "sink"]
    assert [d.tiles[n].at for n in names] == [(1, 0), (1, 1), (0, 1)]
    assert all(d.tiles[n].cls is ForwardTile for n in names)
    # In: the copies are replicas under the route's key; out: one route from each copy.
    assert hops(d, "src", 5) == names
    assert [hops(d, n) for n in names] == [["b"]] * 3
    assert "a" not in d.tiles
    d.check()


def test_a_group_is_copied_as_whole_chains():
    d = row()
    copies = d.replicate(["a", "b"], n=2, step=(0, 1))
    assert copies == [{"a": "a_0", "b": "b_0"}, {"a": "a_1", "b": "b_1"}]
    assert d.tiles["a_1"].at == (1, 1) and d.tiles["b_1"].at == (2, 1)
    assert hops(d, "src", 5) == ["a_0", "a_1"]
    assert hops(d, "a_0") == ["b_0"] and hops(d, "a_1") == ["b_1"]
    assert hops(d, "b_0") == hops(d, "b_1") == ["sink"]
    d.check()


def test_one_copy_renames_only():
    d = row()
    assert d.replicate("a", n=1, step=(0, 1)) == ["a_0"]
    assert hops(d, "src", 5) == ["a_0"]
    d.check()


def test_grants_dependencies_and_wires_follow_the_copies():
    d = row()
    d.depends("a", on="b")
    d.wire("a", "b")
    d.allow("a", "b")
    d.replicate(["a", "b"], n=2, step=(0, 1))
    assert [(w.a, w.b) for w in d.wires] == [("a_0", "b_0"), ("a_1", "b_1")]
    assert [(g.src, g.dst) for g in d.grants] == [("a_0", "b_0"), ("a_1", "b_1")]
    assert [(x.tile, x.on) for x in d.dependencies] == [("a_0", "b_0"), ("a_1", "b_1")]


@pytest.mark.parametrize("copies", [1, 2, 4])
def test_the_replicated_echo_is_deadlock_free(copies):
    d = replicated_echo.design(width=512, copies=copies)
    graph = d.check()
    assert not graph.cycles
    assert [ep.name for ep in d.node_table("lb")["data"][None]] == \
        [f"ip_rx_{k}" for k in range(copies)]
    assert [ep.name for ep in d.node_table("ip_tx_0")["data"][None]] == ["eth_tx"]


def test_a_copy_placed_so_that_chains_cross_is_reported_as_a_deadlock():
    """One copy of ``a`` at (3,1): src → a_1 goes east through (2,0), a_1 → b comes back west
    and north, and b → sink wants (2,0)→E again: the check names the cycle and the copy."""
    d = row()
    where = line_here(1)
    d.replicate("a", n=2, at=[(1, 0), (3, 1)])
    with pytest.raises(DesignError) as info:
        d.check()
    text = str(info.value)
    assert "deadlock on plane 'data'" in text
    assert "link (2,0)→E" in text and "a_1" in text
    assert f"copy 1 at {where}" in text


def test_a_copy_on_a_taken_position_or_off_the_mesh_is_reported():
    d = row()
    where = line_here(1)
    d.replicate("a", n=3, step=(1, 0))        # a_1 on b, a_2 on sink
    text = str(pytest.raises(DesignError, d.check).value)
    assert "'a_1'" in text and "'b'" in text and "(2,0)" in text and where in text
    d = row()
    d.replicate("b", n=3, step=(0, 1))        # b_2 at (2,2): the mesh has 2 rows
    text = str(pytest.raises(DesignError, d.check).value)
    assert "'b_2'" in text


def test_a_route_declared_later_to_the_old_name_is_reported():
    d = row()
    d.replicate("a", n=2, step=(0, 1))
    d.route("a", "sink")
    text = str(pytest.raises(DesignError, d.check).value)
    assert "route a → sink" in text and "tile 'a', which is not declared" in text
    d = replicated_echo.design(width=64, copies=2)
    d.route("lb", "udp_rx")
    text = str(pytest.raises(DesignError, d.check).value)
    assert "tile 'udp_rx', which is not declared (did you mean 'udp_rx_" in text


@pytest.mark.parametrize("call, message", [
    (lambda d: d.replicate("nope", n=2, step=(0, 1)), r"there is no tile 'nope' to replicate"),
    (lambda d: d.replicate("a", n=0, step=(0, 1)), r"n must be a positive integer"),
    (lambda d: d.replicate("a", n=2.0, step=(0, 1)), r"n must be a positive integer"),
    (lambda d: d.replicate("a", n=2), r"place the copies with at= .* or step="),
    (lambda d: d.replicate("a", n=2, at=[(1, 1)], step=(0, 1)), r"one of the two"),
    (lambda d: d.replicate("a", n=2, at=[(1, 1)]), r"a list of 2 \(x, y\) pairs"),
    (lambda d: d.replicate("a", n=2, step=1), r"step= must be a \(dx, dy\) pair"),
    (lambda d: d.replicate(["a", "b"], n=2, at=[(1, 1), (2, 1)]), r"a group's positions"),
    (lambda d: d.replicate(["a", "b"], n=2, at={"a": [(1, 1), (0, 1)]}),
     r"exactly the tiles a, b"),
    (lambda d: d.replicate(["a", "a"], n=2, step=(0, 1)), r"names a tile twice"),
    (lambda d: d.replicate(3, n=2, step=(0, 1)), r"name one tile"),
])
def test_bad_calls_raise_one_error_naming_the_line(call, message):
    d = row()
    with pytest.raises(DesignError, match=message) as info:
        where = line_here(1)
        call(d)
    assert where.rsplit(":", 1)[0] in str(info.value)


def test_a_copy_name_that_is_taken_and_a_wire_out_of_the_group():
    d = row()
    d.add("a_1", ForwardTile, at=(3, 1))
    where = line_here(2)
    with pytest.raises(DesignError) as info:
        d.replicate("a", n=2, step=(0, 1))
    assert str(info.value).startswith(f"replicate 'a' ({where}): a copy of 'a' would be named "
                                      f"'a_1'")
    d = row()
    d.wire("a", "b")
    with pytest.raises(DesignError, match=r"tile 'a' has wires .* to a tile outside the group; "
                                          r"replicate both ends together"):
        d.replicate("a", n=2, step=(0, 1))
    d = row()
    d.replicate("a", n=2, step=(0, 1))
    with pytest.raises(DesignError, match=r"no tile 'a' to replicate \(already replicated: "
                                          r"a_0, a_1\)"):
        d.replicate("a", n=2, step=(0, 1))


# -- the replicated echo, end to end --------------------------------------------------------------

MAC, IPV4 = "02:00:00:00:00:02", "10.0.0.2"


def requests(count, seed):
    """``count`` UDP requests to port 7 from assorted clients (addresses, ports, sizes)."""
    import random

    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    rng = random.Random(seed)
    frames = []
    for k in range(count):
        payload = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 18, 64, 130])))
        frames.append(bytes(Ether(dst=MAC, src="02:00:00:00:00:09")
                            / IP(src=f"10.0.{rng.randrange(4)}.{rng.randrange(1, 250)}",
                                 dst=IPV4, id=k)
                            / UDP(sport=rng.randrange(1024, 65536), dport=7) / payload
                            ).ljust(60, b"\0"))
    return frames


def echo_all(backend, width, copies, policy, frames):
    from apiary.sim import open_sim
    from beehive.model import echo_reply

    d = replicated_echo.design(width=width, copies=copies, policy=policy)
    with open_sim(d, backend, seed=3, stall=0.2) as sim:
        sim.send_many(frames)
        sim.run(max_cycles=50_000)
        got = [f.data for f in sim.received()]
        counters = sim.counters()
    want = [echo_reply(f, mac=MAC, ipv4=IPV4, port=7)[0] for f in frames]
    assert sorted(got) == sorted(want)          # every reply, exact, none twice
    per_copy = [counters[f"lb_ip_rx_{k}_forwarded"] for k in range(copies)]
    assert sum(per_copy) == len(frames)
    assert [counters[f"ip_tx_{k}_forwarded"] for k in range(copies)] == per_copy
    assert counters["lb_dropped"] == counters["lb_no_route"] == 0
    return per_copy


@pytest.mark.parametrize("policy", ["round_robin", "hash", "port"])
def test_replicated_echo_returns_every_reply_pysim(policy):
    frames = requests(8, seed=1)
    per_copy = echo_all("pysim", 64, 2, policy, frames)
    if policy == "round_robin":
        assert per_copy == [4, 4]
    if policy == "port":
        assert per_copy == [0, 8]                   # port 7 % 2


@pytest.mark.slow
def test_replicated_echo_returns_every_reply_verilator():
    """Four copies on Verilator at 64 bits (the balancer alone is tested at 512 too; a 512-bit
    model of 24 tiles takes many minutes to build)."""
    from beehive.nf.balancer import flow_tuple, hash_replica
    from beehive.proto.addresses import ipv4_to_int
    from scapy.layers.inet import IP

    frames = requests(60, seed=2)
    per_copy = echo_all("verilator", 64, 4, "hash", frames)
    want = [0] * 4
    for f in frames:
        ip = IP(f[14:])
        want[hash_replica(flow_tuple(ipv4_to_int(ip.src), ipv4_to_int(ip.dst), ip.sport,
                                     ip.dport), 4)] += 1
    assert per_copy == want
