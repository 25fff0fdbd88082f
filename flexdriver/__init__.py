"""FlexDriver (Eran et al., ASPLOS 2022) beside the Beehive stack: a NIC's data plane driven
from the FPGA instead of a network stack on it.

So far: :mod:`flexdriver.nic`, a ConnectX-style NIC model in Python that such a driver
talks to (queues of descriptors, doorbells, completions, DMA with a latency, receive offloads),
and its formats (:mod:`flexdriver.formats`). The FLD module itself (the ring managers and
compressed descriptors in Amaranth) is not built yet; its descriptor translation is
:class:`apiary.stream.cuckoo.CuckooTable`. The network contract FlexDriver gives tiles on the
NoC (receive guard, transmit credits, tenant shaping) is in :mod:`apiary.tiles`.
"""
