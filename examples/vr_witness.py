"""Viewstamped Replication witnesses, one per shard, each an untrusted tile behind an Apiary
monitor (the Beehive paper's consensus witness, section VI-B, under the Apiary kernel).

The UDP echo stack of ``examples/udp_echo.py``, ``shards`` :class:`~beehive.apps.vr_witness.
VrWitnessTile`\\ s (``vr0``, ``vr1``...; shard *i* on UDP port ``base_port + i``), the Apiary
kernel (memory manager ``mm``, error manager ``errors``, one memory tile ``mem0``) and the
kernel's control service ``ctl`` (UDP port 7100: the fault log, releases, IPC grants). With one
shard, a 5 × 3 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx ─▶ (3,0) vr0*     (4,0) mm
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx ◀─ (3,1) ctl      (4,1) errors
    (0,2) arp       (1,2) icmp     (2,2) echo      (3,2) mem0

    * untrusted: behind a monitor

More shards take the places after ``vr0`` (column 3, then on), the kernel's tiles move right.
Each witness may send only to UDP TX (an IPC capability) and hear only UDP RX. A witness that
breaks a rule is quarantined: its monitor sinks its messages, and the VR group (leader +
replica) carries on without it. Revoking its capability to send to UDP TX over port 7100
(``beehive.apps.kernel_ctl.ipc_request(..., grant=False)``) makes its next reply such a
violation; ``docs/vr-witness.md`` and ``tests/vr/test_vr_fpga.py`` do exactly that::

    apiary check examples/vr_witness.py
    apiary sim   examples/vr_witness.py --tap tap0 --width 64
    python -m harness.vr_bench --shards 1 --ops 200      # the group against it, simulated

``design(width=64, shards=1, base_port=9000, log_depth=256, ...)``.
"""

from apiary.design import Design
from apiary.load import sibling
from apiary.os.kernel import Kernel
from beehive.apps.kernel_ctl import CTL_PORT, add_control_service
from beehive.apps.vr_witness import REPLY_KEY, VrWitnessTile
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC


udp_echo = sibling(__file__, "udp_echo.py")

BASE_PORT = 9000
MEMORY_BYTES = 1 << 12
MAX_SHARDS = 8


def places(shards, cols=3, rows=3):
    """Mesh positions right of the stack, column by column: the witnesses', then ``ctl``'s,
    ``mem0``'s, ``mm``'s and ``errors``'."""
    return [(cols + k // rows, k % rows) for k in range(shards + 4)]


def design(width=64, shards=1, base_port=BASE_PORT, log_depth=256, mac=DEFAULT_MAC,
           ipv4=DEFAULT_IPV4):
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be an integer from 1 to {MAX_SHARDS}, not {shards!r}")
    spots = places(shards)
    d = Design("vr_witness", cols=spots[-1][0] + 1, rows=3, width=width)
    d.settings.update(mac=mac, ipv4=ipv4)
    udp_echo.build_stack(d)
    ctl, mem0, mm, errors = spots[shards:]
    kernel = Kernel(d, manager=mm, errors=errors, memories={"mem0": (mem0, MEMORY_BYTES)})
    for shard in range(shards):
        name = f"vr{shard}"
        d.add(name, VrWitnessTile, at=spots[shard], shard=shard, log_depth=log_depth,
              trusted=False)
        d.route("udp_rx", name, key=base_port + shard)
        d.route(name, "udp_tx", key=REPLY_KEY, allow=True)
    add_control_service(d, kernel, at=ctl, port=CTL_PORT)
    return d
