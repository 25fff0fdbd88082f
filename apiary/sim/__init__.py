"""Simulation: one testbench API over Amaranth's simulator and Verilator, pcap in and out.

::

    from apiary.sim import open_sim

    with open_sim(design, "verilator", seed=1, stall=0.1) as sim:
        sim.send(Ether() / IP() / UDP() / b"hi")     # or bytes; port= if several
        sim.run()                                    # until idle
        frames = sim.received()                      # [Frame(data, cycle_first, cycle_last)]
        print(sim.counters())                        # the bank: {"eth_rx_forwarded": 1, ...}

    with open_sim(design, impair=Impairment(loss=0.05, seed=7)) as sim:   # a lossy link
        ...
        print(sim.link().summary())                  # to design: 20 frames, 1 lost, ...

See ``docs/simulation.md``.
"""

import os
from typing import TYPE_CHECKING, Any

from ..top import Attachment, DesignTop, no_progress
from .base import Sim, DEFAULT_CLOCK_HZ, DEFAULT_IDLE_CYCLES, default_clock_mhz
from .core import Frame, FramePort, SimError, BuildError, find_ports
from .impair import Impairment, ImpairedLink, LinkDirection


__all__ = ["open_sim", "Sim", "Frame", "FramePort", "SimError", "BuildError", "BACKENDS",
           "elaborate", "memory_models", "DEFAULT_CLOCK_HZ", "DEFAULT_MEMORY_LATENCY",
           "memory_latency_of", "Impairment", "ImpairedLink", "LinkDirection",
           "default_clock_mhz"]

BACKENDS = ("pysim", "verilator")

if TYPE_CHECKING:
    from ..os.memory import Latency


#: Read latency of the memory models the simulators attach, unless a design's
#: ``settings["memory_latency"]`` or ``memory_latency=`` says otherwise.
DEFAULT_MEMORY_LATENCY = 20


def memory_latency_of(design: Any, memory_latency: object = None) -> "Latency":
    """The read latency of the memory models a simulation of ``design`` attaches:
    ``memory_latency`` if given, else ``design.settings["memory_latency"]``, else
    :data:`DEFAULT_MEMORY_LATENCY`.

    A latency is a positive number of cycles (every read answered exactly that many cycles after
    its command), or a range ``(lo, hi)``, ``1 <= lo <= hi``: each read's latency drawn from
    ``[lo, hi]``, seeded, reads kept in order (see :class:`~apiary.os.memory.MemoryModel`).
    Returns an int, or a ``(lo, hi)`` tuple (a list is taken as one; ``(n, n)`` is ``n``).

    Raises
    ------
    SimError
        Anything else."""
    from ..os.memory import check_latency
    if memory_latency is None:
        memory_latency = getattr(design, "settings", {}).get("memory_latency",
                                                              DEFAULT_MEMORY_LATENCY)
    try:
        return check_latency(memory_latency)
    except ValueError:
        raise SimError(f"memory_latency must be a positive number of cycles or a range "
                       f"(lo, hi) of them with 1 <= lo <= hi, not {memory_latency!r}") from None


def memory_models(latency: "Latency", model: type | None = None, *,
                  seed: int | None = None) -> Attachment:
    """The :class:`~apiary.top.Attachment` that gives every memory port of a design a memory
    model (``model``, default :class:`~apiary.os.memory.MemoryModel`) of read latency
    ``latency`` (and of the port's depth), inside the top level.

    ``latency`` is an int or a range ``(lo, hi)`` (:func:`memory_latency_of`); a range's
    latencies are drawn from a generator seeded by ``seed`` (``None``: 1, as ``open_sim``'s
    ``seed``). Every model in the design starts from the same seed; each draws once per read it
    takes. A fixed latency ignores ``seed`` (and its Verilog, hence its Verilator model, is the
    same whatever the seed; a range's is one per seed).
    """
    from ..os.memory import MemoryModel, MemoryPortSignature, check_latency
    model = MemoryModel if model is None else model
    try:
        latency = check_latency(latency)
    except ValueError as e:
        raise SimError(str(e)) from None
    seed = 1 if seed is None else seed
    if isinstance(latency, tuple):
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 1 << 32:
            raise SimError(f"seed must be an integer from 0 to 2**32-1, not {seed!r}")
        extra = {"seed": seed}
        key = f"{model.__name__}(latency={latency}, seed={seed})"
    else:
        extra = {}
        key = f"{model.__name__}(latency={latency})"

    def build(sig):
        instance = model(sig.data_width, sig.addr_width, depth_words=sig.depth_words,
                         latency=latency, **extra)
        return instance, instance.port
    return Attachment("model", MemoryPortSignature, build, key)


def elaborate(design: Any, memory_latency: object = None, backend: str = "pysim", *,
              seed: int | None = None) -> tuple[DesignTop, list, list[str]]:
    """Check the design and build its top level for ``backend``: ``(top, ports,
    counter_names)``.

    Every memory port of a tile (a :class:`~apiary.os.memory.MemoryPortSignature` member, such
    as :class:`~apiary.os.memory_tile.MemoryTile`'s ``mem``) gets a memory model inside the top
    (:class:`~apiary.os.memory.MemoryModel`; for Verilator, the same with its words in a plain
    RAM, :class:`~apiary.sim.verilator.RamMemoryModel`), with the read latency of
    :func:`memory_latency_of` (a range's draws seeded by ``seed``, see :func:`memory_models`);
    the counters are the top's counter bank.
    """
    model: type | None = None
    if backend == "verilator":
        from .verilator import RamMemoryModel
        model = RamMemoryModel
    top = DesignTop(design, attach=[memory_models(memory_latency_of(design, memory_latency),
                                                  model, seed=seed)])
    return top, find_ports(top), top.bank.names


def open_sim(design, backend="pysim", *, seed=None, stall=0.0, gaps=None,
             clock_hz=DEFAULT_CLOCK_HZ, idle_cycles=DEFAULT_IDLE_CYCLES, vcd=None,
             vcd_window=None, cache_dir=None, progress=None, memory_latency=None, impair=None,
             netlist=None, netlist_tiles=None):
    """Open a simulation of ``design`` on ``backend``; returns a :class:`Sim`.

    Parameters
    ----------
    design : Design
    backend : "pysim" or "verilator"
        Amaranth's simulator (no build, ~10³ cycles/s) or a Verilator model (built once and
        cached under ``~/.cache/apiary/verilator``, ~10⁵–10⁶ cycles/s).
    seed : int or None
        Seeds the stall and gap generators, and the memory models' latencies when
        ``memory_latency`` is a range (``None``: 1). Same seed, same pattern, either back end.
    stall : float
        Probability that ``mac_tx.ready`` is low on a cycle (back-pressure from the wire).
    gaps : float or None
        Probability of an idle cycle before each word offered on ``mac_rx``; default ``stall``.
    clock_hz : float
        The clock cycles convert to time at (default 250 MHz, the Beehive paper's).
    idle_cycles : int
        Quiet cycles after which :meth:`Sim.run` considers the design idle.
    vcd : path or None
        Write a waveform (VCD) of the run to this file when the simulation is closed.
    vcd_window : (start, end) or None
        Only cycles ``start`` to ``end`` (inclusive) in the waveform.
    cache_dir : path or None
        Verilator model cache (default ``$APIARY_CACHE`` or ``~/.cache/apiary``, then
        ``verilator/``).
    progress : Progress or None
        Where the Verilog conversion and the Verilator build report, when they run (see
        :data:`apiary.top.Progress`; the command line passes a status line). Default: silent.
    memory_latency : int, (int, int) or None
        Read latency in cycles of the memory models attached to the design's memory ports
        (default: the design's ``settings["memory_latency"]``, else 20); or a range
        ``(lo, hi)``: every read answered ``lo`` to ``hi`` cycles after its command, its
        latency drawn uniformly from the range by a generator in the model seeded by ``seed``,
        reads kept in order (each answered on ``max(command + draw, previous answer + 1)``),
        writes unchanged. The same seed gives the same draws on both back ends;
        ``apiary.os.memory.random_latencies`` lists them. ``(10, 20)`` is the Apiary thesis's
        portability experiment. With a range, the seed is part of the design's Verilog: each
        seed is its own Verilator model (built once, cached).
    impair : Impairment or None
        A lossy link between the testbench and the design (:mod:`apiary.sim.impair`): frames
        sent pass its ``to_design`` direction, frames received its ``from_design`` one;
        ``sim.link()`` has the counts. ``None`` (or an all-zero one): a perfect link, exactly
        as without.
    netlist : "ecp5" or None
        Verilator only: build the model from the design's netlist instead of its RTL: ``"ecp5"``,
        the core as Yosys's ``synth_ecp5`` leaves it (the board builds' script), simulated with
        the ECP5 cells' models; the memory models stay RTL (:mod:`apiary.sim.netlist`). The
        netlist and the model are cached as models are. ``None``: the RTL.
    netlist_tiles : iterable of str or None
        With ``netlist``: synthesise only these tiles (with their monitors and control agents,
        and the core's own logic between its submodules); the other tiles, the meshes and the
        memory models stay RTL beside the netlist. A smaller synthesis and model, for a test
        of some tiles' netlists in a design whose other tiles another test covers. ``None``:
        the whole core.

    Raises
    ------
    DesignError
        The design does not pass its checks.
    SimError
        A bad argument, or a design without an Ethernet port.
    BuildError
        The Verilator model could not be built (a missing compiler, a failed build), naming the
        tool and quoting its output.
    """
    if backend not in BACKENDS:
        raise SimError(f"unknown simulation back end {backend!r}; choose one of "
                       f"{', '.join(BACKENDS)}")
    source = None
    if netlist is not None:
        from .netlist import NETLISTS
        if netlist not in NETLISTS:
            raise SimError(f"unknown netlist {netlist!r}; choose one of {', '.join(NETLISTS)}")
        if backend != "verilator":
            raise SimError(f"netlist={netlist!r} runs on Verilator, not on {backend!r}")
        if netlist_tiles is not None:
            netlist_tiles = tuple(netlist_tiles)
            unknown = [t for t in netlist_tiles if t not in design.tiles]
            if unknown or not netlist_tiles:
                raise SimError(f"netlist_tiles names {', '.join(map(repr, unknown)) or 'no tile'}"
                               f"; the design's tiles are {', '.join(design.tiles)}")
        source = NETLISTS[netlist](netlist_tiles)
    elif netlist_tiles is not None:
        raise SimError("netlist_tiles needs netlist= (which netlist to synthesise them to)")
    if vcd_window is not None:
        if (not isinstance(vcd_window, (tuple, list)) or len(vcd_window) != 2
                or not all(isinstance(c, int) and c >= 0 for c in vcd_window)
                or vcd_window[0] > vcd_window[1]):
            raise SimError(f"vcd_window must be a (start, end) pair of cycles with "
                           f"0 <= start <= end, not {vcd_window!r}")
        if vcd is None:
            raise SimError("vcd_window needs vcd= (the file to write)")
    vcd = None if vcd is None else os.fspath(vcd)
    top, ports, counters = elaborate(design, memory_latency, backend, seed=seed)
    common = dict(seed=seed, stall=stall, gaps=gaps, clock_hz=clock_hz, idle_cycles=idle_cycles,
                  impair=impair)
    if backend == "pysim":
        from .pysim import PysimSim
        return PysimSim(design, top, ports, counters, vcd=vcd, vcd_window=vcd_window, **common)
    from .verilator import VerilatorSim
    return VerilatorSim(design, top, ports, counters, vcd=vcd, vcd_window=vcd_window,
                        cache_dir=cache_dir, progress=progress or no_progress, source=source,
                        **common)
