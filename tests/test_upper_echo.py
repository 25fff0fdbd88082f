"""The tile of docs/writing-a-tile.md (examples/upper_echo.py), exactly as the guide builds it:
checked, then run on Amaranth's simulator at 64 bits with scapy frames: datagrams to its port
come back upper-cased, addressed to their sender, with their counters; the plain echo beside it
is unchanged. The guide's code is the example's, and its test snippet runs."""

import ast
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.load import load_design
from apiary.sim import open_sim

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLE = str(ROOT / "examples" / "upper_echo.py")
GUIDE = ROOT / "docs" / "writing-a-tile.md"
MAC, IPV4 = "02:00:00:00:00:02", "10.0.0.2"
PEER_MAC, PEER_IP = "52:54:00:12:34:56", "10.0.0.1"


def udp(payload, dport, sport=40000):
    return Ether(dst=MAC, src=PEER_MAC) / IP(src=PEER_IP, dst=IPV4) / UDP(
        sport=sport, dport=dport) / payload


def test_the_design_is_sound_and_places_the_tile():
    design = load_design(EXAMPLE)
    assert "no deadlock" in design.check().summary()
    upper = design.tiles["upper"]
    assert (upper.cls.__name__, upper.at) == ("UpperEchoTile", (3, 1))


def test_a_tile_without_one_next_hop_is_refused():
    from apiary.load import load_script
    from apiary.tile import TileEnv
    tile_cls = load_script(EXAMPLE).UpperEchoTile
    with pytest.raises(ValueError, match="needs one next hop"):
        tile_cls(TileEnv("upper", width=64))


def test_datagrams_come_back_upper_cased_and_are_counted():
    payloads = [b"hello, world", b"", b"Mixed Case 123 {az} `AZ` @[", bytes(range(256)) * 2]
    requests = [udp(p, dport=7007, sport=5000 + i) for i, p in enumerate(payloads)]
    requests.append(udp(b"plain echo", dport=7))
    with open_sim(load_design(EXAMPLE, width=64), "pysim") as sim:
        sim.send_many(requests)
        sim.run()
        replies = [Ether(f.data) for f in sim.received()]
        counters = sim.counters()

    assert len(replies) == len(requests)
    by_port = {r[UDP].dport: r for r in replies}
    for i, payload in enumerate(payloads):
        reply = by_port[5000 + i]
        assert reply[Ether].dst == PEER_MAC and reply[IP].dst == PEER_IP
        assert reply[UDP].sport == 7007
        assert bytes(reply[UDP].payload) == payload.upper()
        assert reply[UDP].chksum == 0                  # the payload changed: no checksum
    assert bytes(by_port[40000][UDP].payload) == b"plain echo"   # port 7: the echo tile
    assert counters["upper_datagrams"] == len(payloads)
    assert counters["upper_bytes"] == sum(len(p) for p in payloads)
    assert counters["upper_letters"] == sum(chr(c).islower() and chr(c).isascii()
                                            for p in payloads for c in p)


def guide_blocks():
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)


def test_the_guide_quotes_the_example_as_it_is():
    source = pathlib.Path(EXAMPLE).read_text()
    lines = source.splitlines()
    functions = {node.name: node for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.FunctionDef)}
    blocks = guide_blocks()
    for name in ("elaborate", "design"):
        node = functions[name]
        text = textwrap.dedent("\n".join(lines[node.lineno - 1:node.end_lineno]))
        assert any(text in block for block in blocks), f"the guide's {name}() is not the example's"


def test_the_guide_prints_the_whole_example_and_a_copy_runs_from_an_empty_folder(tmp_path):
    """The guide's last block is examples/upper_echo.py as it is; written into an empty folder
    outside the repository, it is all the guide's simulation snippet needs (the packages come
    from the installation, nothing from examples/)."""
    blocks = guide_blocks()
    assert blocks[-1] == pathlib.Path(EXAMPLE).read_text()
    (tmp_path / "upper_echo.py").write_text(blocks[-1])
    snippet, = [b for b in blocks if "open_sim" in b]
    assert "upper_datagrams" in snippet and "examples/upper_echo.py" in snippet
    run = subprocess.run([sys.executable, "-c",
                          snippet.replace("examples/upper_echo.py", "upper_echo.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
