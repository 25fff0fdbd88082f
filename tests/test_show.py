"""The SVG drawing: well-formed, complete, and the deadlock cycle in red."""

import pathlib
import re
import xml.etree.ElementTree as ET

from apiary.design import Design
from apiary.load import load_design
from apiary.show import CYCLE_COLOUR, PLANE_STYLES, render_svg
from apiary.tile import Receive, Send
from apiary.tiles import ForwardTile, PortTile

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
NS = "{http://www.w3.org/2000/svg}"


def parse(text):
    root = ET.fromstring(text.encode())
    assert root.tag == f"{NS}svg"
    return root


def texts(root):
    return [el.text or "" for el in root.iter(f"{NS}text")]


def classes(el):
    return (el.get("class") or "").split()


def test_fig5a_draws_every_tile_and_a_red_cycle():
    design = load_design(str(EXAMPLES / "deadlock_fig5a.py"))
    root = parse(render_svg(design))
    words = texts(root)
    for name in design.tiles:
        assert name in words
    assert "ForwardTile" in words and "PortTile" in words
    red = [el for el in root.iter() if "cycle" in classes(el) and el.get("stroke") == CYCLE_COLOUR]
    links = {el.get("data-link") for el in red if el.get("data-link")}
    assert links == {"link (1,0)→E", "link (2,0)→W"}
    caption = [t for t in words if t.startswith("Deadlock on plane 'data'")]
    assert caption and "udp.out → link (1,0)→E" in caption[0]
    # the two tiles of the cycle are outlined in red
    tiles = [g for g in root.iter(f"{NS}g") if "tile" in classes(g)]
    red_tiles = {g.find(f"{NS}text").text for g in tiles if "cycle" in classes(g)}
    assert red_tiles == {"udp", "ip"}


def test_fig5b_has_routes_and_no_red():
    design = load_design(str(EXAMPLES / "deadlock_fig5b.py"))
    text = render_svg(design)
    root = parse(text)
    assert CYCLE_COLOUR not in text
    routes = [g for g in root.iter(f"{NS}g") if "route" in classes(g)]
    assert len(routes) == 3
    for g in routes:
        line = g.find(f"{NS}polyline")
        assert line.get("stroke") == PLANE_STYLES["data"]["colour"]
        assert line.get("marker-end") == "url(#arrow-data)"
    assert "no deadlock" in texts(root)


def test_routes_follow_xy_paths_and_planes_differ():
    class Both(ForwardTile):
        planes = ("data", "ctl")
        inputs = (*ForwardTile.inputs, Receive("ctl_messages", plane="ctl", raw=True))
        outputs = (*ForwardTile.outputs, Send("ctl_forwarded", plane="ctl", raw=True))
    d = Design("two_planes", cols=3, rows=3)
    d.add("a", Both, at=(0, 0))
    d.add("b", Both, at=(2, 2))
    d.add("c", PortTile, at=(2, 0))
    d.route("a", "b")
    d.route("a", "b", plane="ctl")
    d.route("a", "c")
    root = parse(render_svg(d))
    routes = [g for g in root.iter(f"{NS}g") if "route" in classes(g)]
    lines = [g.find(f"{NS}polyline") for g in routes]
    # a → b turns once (east then south): start, corner, end
    assert len(lines[0].get("points").split()) == 3
    assert len(lines[2].get("points").split()) == 2
    assert lines[0].get("stroke") != lines[1].get("stroke")
    assert lines[1].get("stroke-dasharray") == PLANE_STYLES["ctl"]["dash"]
    # parallel routes on the same links are drawn apart
    assert lines[0].get("points") != lines[1].get("points")
    assert lines[0].get("points").split()[0] != lines[2].get("points").split()[0]
    # empty positions are drawn as router-only
    assert texts(root).count("router only") == len(d.empty_positions()) == 6


def test_mesh_without_routes():
    design = load_design(str(EXAMPLES / "mesh_3x3.py"))
    root = parse(render_svg(design))
    words = texts(root)
    assert all(name in words for name in design.tiles)
    assert len([el for el in root.iter(f"{NS}rect") if "router" in classes(el)]) == 9


def test_text_is_escaped():
    d = Design("a<b>&c", cols=2, rows=1)
    d.add("x", ForwardTile, at=(0, 0))
    d.add("y", ForwardTile, at=(1, 0))
    d.route("x", "y", key="<&>")
    root = parse(render_svg(d))
    assert "a<b>&c" in texts(root)
    titles = [el.text for el in root.iter(f"{NS}title")]
    assert any("x → y [key '<&>'" in t for t in titles)


def test_untrusted_tiles_get_a_monitor_and_granted_routes_a_key():
    """examples/apiary_fault.py: a monitor drawn at each of the two untrusted applications and
    nowhere else, "untrusted" under their names, the monitor in the legend, and the key mark on
    exactly the routes an IPC capability covers (the two applications' replies)."""
    root = parse(render_svg(load_design(str(EXAMPLES / "apiary_fault.py"))))
    monitors = [g for g in root.iter(f"{NS}g") if "monitor" in classes(g)]
    assert len(monitors) == 2
    assert sorted(t for t in texts(root) if t == "untrusted") == ["untrusted"] * 2
    keyed = [t for t in texts(root) if t.endswith("⚿")]
    assert sorted(keyed) == ["app_a → udp_tx [key 'reply']  (UDP_TX_SEGMENT) ⚿",
                            "app_b → udp_tx [key 'reply']  (UDP_TX_SEGMENT) ⚿"]
    assert any("Apiary monitor" in t for t in texts(root))
    plain = parse(render_svg(load_design(str(EXAMPLES / "udp_echo.py"))))
    assert not [g for g in plain.iter(f"{NS}g") if "monitor" in classes(g)]


def test_no_absolute_paths_from_a_design_outside_the_current_directory(tmp_path, monkeypatch):
    # Loaded by absolute path from elsewhere, so every declaration's file:line is absolute; the
    # drawing names the file alone (in the tiles' and routes' titles, the route list and the
    # deadlock caption).
    monkeypatch.chdir(tmp_path)
    design = load_design(str(EXAMPLES / "deadlock_fig5a.py"))
    assert str(EXAMPLES) in design.routes[0].where
    text = render_svg(design)
    assert str(EXAMPLES) not in text
    assert not re.search(r"(?<![\w.])/(?:[\w.-]+/)+[\w.-]+\.py", text)
    root = parse(text)
    assert any(re.fullmatch(r"deadlock_fig5a\.py:\d+", t) for t in texts(root))
    titles = [el.text or "" for el in root.iter(f"{NS}title")]
    assert any("declared at deadlock_fig5a.py:" in t for t in titles)
    assert "deadlock_fig5a.py:" in "".join(t for t in texts(root) if "(" in t)


def test_routes_are_labelled_with_the_message_types_their_ends_declare():
    """The route list names what each route carries, from the tiles' declared ports: UDP RX's
    segments to the echo, the echo's replies to UDP TX, Ethernet frames to ARP."""
    d = load_design(str(pathlib.Path(__file__).resolve().parents[1] / "examples" / "udp_echo.py"),
                    width=64)
    svg = render_svg(d)
    listed = re.findall(r">([a-z_]+ → [^<]*)<", svg)
    assert "udp_rx → echo [key 7]  (UDP_RX_SEGMENT)" in listed
    assert "echo → udp_tx  (UDP_TX_SEGMENT)" in listed
    assert "eth_rx → arp [key 0x0806]  (ETH_RX_FRAME)" in listed
