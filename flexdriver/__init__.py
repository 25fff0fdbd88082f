"""FlexDriver (Eran et al., ASPLOS 2022) beside the Beehive stack: a NIC's data plane driven
from the FPGA instead of a network stack on it.

So far: a ConnectX-style NIC model in Python that such a driver talks to (:mod:`flexdriver.nic`:
queues of descriptors, doorbells, completions, DMA with a latency, receive offloads) and its
formats (:mod:`flexdriver.formats`); FLD's compressed descriptors and their conversions in
Amaranth (:mod:`flexdriver.descriptors`); FLD's echo in software on the model, which Linux
reaches over TAP (:mod:`flexdriver.echo`); and FLD's shared transmit descriptor pool behind
the NIC's per-queue rings (:mod:`flexdriver.tx_pool`, through
:class:`apiary.stream.cuckoo.CuckooTable`); its receive side (:mod:`flexdriver.rx_path`). The
rest of the FLD module (the transmit buffers and credits, the PCIe side) is not built yet.
The network contract FlexDriver gives tiles on the NoC (receive guard, transmit credits,
tenant shaping) is in :mod:`apiary.tiles`.
"""
