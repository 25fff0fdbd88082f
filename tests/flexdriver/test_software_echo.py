"""FLD-E's echo in software on the NIC model (flexdriver/echo.py): ARP answered, UDP echoed with
the checksums the NIC fills in, the queues wrapping many times over."""

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.utils import rdpcap

from flexdriver.echo import SoftwareEcho
from flexdriver.formats import IP_OK, IS_IPV4, IS_UDP, L4_OK
from flexdriver.nic import HostMemory, NicModel

MAC, IP_ADDR = "02:00:00:00:0f:1d", "10.0.0.2"
PEER_MAC, PEER_IP = "02:00:00:00:00:01", "10.0.0.1"


def request(i):
    return Ether(src=PEER_MAC, dst=MAC) / IP(src=PEER_IP, dst=IP_ADDR) / UDP(
        sport=30000 + i, dport=7) / (b"echo %d " % i * (1 + i % 5))


def run(nic, echo, cycles):
    for _ in range(cycles // 50):
        nic.advance(nic.now + 50)
        echo.poll()


def test_arp_then_three_hundred_datagrams_echoed_with_good_checksums(tmp_path):
    memory = HostMemory()
    nic = NicModel(memory, latency=40, jitter=15, seed=7)
    echo = SoftwareEcho(nic, memory, MAC, IP_ADDR, entries=16)
    run(nic, echo, 500)                                # (the buffers' doorbell lands)
    nic.receive(bytes(Ether(src=PEER_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc=PEER_MAC, psrc=PEER_IP, pdst=IP_ADDR)))
    run(nic, echo, 2000)
    (_, reply), = nic.wire
    arp = Ether(reply)[ARP]
    assert (arp.op, arp.hwsrc, arp.psrc, arp.pdst) == (2, MAC, IP_ADDR, PEER_IP)
    sent = [request(i) for i in range(300)]
    for burst in range(0, 300, 12):                   # bursts under the 16 buffers
        for pkt in sent[burst:burst + 12]:
            nic.receive(bytes(pkt))
        run(nic, echo, 3000)
    replies = [Ether(f) for _, f in nic.wire[1:]]
    assert len(replies) == 300 and echo.counters.echoed == 300
    for pkt, got in zip(sent, replies):
        expected = Ether(src=MAC, dst=PEER_MAC) / IP(src=IP_ADDR, dst=PEER_IP) / UDP(
            sport=7, dport=pkt[UDP].sport) / bytes(pkt[UDP].payload)
        assert bytes(got) == bytes(expected)           # both checksums filled in right
    assert set(echo.counters.checks[1:]) == {IS_IPV4 | IS_UDP | IP_OK | L4_OK}
    assert (echo.counters.errors, echo.counters.tx_busy) == (0, 0)
    assert echo.cq_consumer == 2 * 301 and nic.counters.out_of_buffer == {}   # RX and TX
    # The wire, both ways, as a pcap: each request before its echo.
    assert nic.capture(str(tmp_path / "wire.pcap"), 250e6) == 602
    packets = rdpcap(str(tmp_path / "wire.pcap"))
    assert [bytes(p) for p in packets[:2]] == [bytes(nic.arrived[0][1]), reply]
    times = [float(p.time) for p in packets]
    assert times == sorted(times) and round(times[1] * 250e6) == nic.wire[0][0]


def test_a_burst_over_the_buffers_is_dropped_by_the_nic_and_counted():
    memory = HostMemory()
    nic = NicModel(memory, latency=40)
    echo = SoftwareEcho(nic, memory, MAC, IP_ADDR, entries=8)
    run(nic, echo, 500)
    for i in range(20):
        nic.receive(bytes(request(i)))
    run(nic, echo, 5000)
    assert echo.counters.echoed == 8 and nic.counters.out_of_buffer == {1: 12}
    nic.receive(bytes(request(99)))                    # and the next one goes through
    run(nic, echo, 2000)
    assert echo.counters.echoed == 9 and Ether(nic.wire[-1][1])[UDP].dport == 30099


def test_a_tap_device_it_cannot_open_is_one_line_not_a_traceback(capsys):
    from flexdriver.echo import main
    assert main(["--tap", "a-name-far-too-long-for-linux", "--ip", IP_ADDR]) == 1
    err = capsys.readouterr().err
    assert err.startswith("python -m flexdriver.echo: TAP device name") and "Traceback" not in err
    assert err.count("\n") == 1
