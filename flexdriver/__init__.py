"""FlexDriver (Eran et al., ASPLOS 2022) beside the Beehive stack: a NIC's data plane driven
from the FPGA instead of a network stack on it.

A ConnectX-style NIC model in Python that FLD drives (:mod:`flexdriver.nic`: queues of
descriptors, doorbells, completions, DMA with a latency, receive offloads) and its formats
(:mod:`flexdriver.formats`); the FLD module in Amaranth (:mod:`flexdriver.fld`): compressed
descriptors (:mod:`flexdriver.descriptors`), the shared transmit descriptor pool behind the
NIC's per-queue rings (:mod:`flexdriver.tx_pool`, through
:class:`apiary.stream.cuckoo.CuckooTable`), the transmit side with its shared buffer and
credits (:mod:`flexdriver.tx_path`), the receive side (:mod:`flexdriver.rx_path`); two
accelerators behind it, FLD-E (:mod:`flexdriver.fld_echo`) and Beehive's Reed-Solomon encoder
on the NIC's offloads (:mod:`flexdriver.fld_rs`); the software FLD leaves to the host
(:mod:`flexdriver.control`); the NIC model and the hardware in one simulation
(:mod:`flexdriver.sim`); and the echo on the model, in software or in Amaranth's simulator,
which Linux reaches over TAP (:mod:`flexdriver.echo`). The network contract FlexDriver gives
tiles on the NoC (receive guard, transmit credits, tenant shaping) is in :mod:`apiary.tiles`.
"""
