import pytest


@pytest.fixture
def loopback_dram():
    """``(width=64, size_bytes=1 << 20) -> Design``: a reduced design for the LiteX flow, an
    Ethernet port that reflects every frame plus a memory tile (so the SoC has LiteDRAM)."""
    def make(width=64, size_bytes=1 << 20):
        from apiary.design import Design
        from apiary.os.memory_tile import MemoryTile
        from apiary.tiles.forward import ForwardTile
        from apiary.tiles.frame_port import FramePortTile
        d = Design("loopback_dram", cols=3, rows=1, width=width)
        d.add("eth", FramePortTile, at=(0, 0))
        d.add("reflect", ForwardTile, at=(1, 0))
        d.add("memory", MemoryTile, at=(2, 0), size_bytes=size_bytes)
        d.route("eth", "reflect")
        d.route("reflect", "eth")
        return d
    return make
