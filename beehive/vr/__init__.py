"""Viewstamped Replication on the Linux side: a 3-node group (leader, replica, witness) serving
a key-value store, its clients and workload; the witness is the FPGA tile
(:mod:`beehive.apps.vr_witness`, over UDP or in simulation) or :class:`SoftwareWitness`."""
