"""A memory port shaped like LiteDRAM's native user port, and a memory model for simulation.

The port (:func:`memory_port_signature`) is seen from the *master*, the tile that uses the
memory: three streams, as LiteDRAM's ``LiteDRAMNativePort`` has them.

=========  =====  ==================================  =============================================
stream     flow   payload                             meaning
=========  =====  ==================================  =============================================
``cmd``    Out    ``we`` (1), ``addr`` (addr_width)   one command per transfer; ``addr`` is a
                                                      *word* address
``wdata``  Out    ``data`` (data_width),              the data of a write command, one word per
                  ``we`` (data_width // 8)            write, in command order; ``we`` are byte
                                                      enables (bit *k* for byte lane *k*)
``rdata``  In     ``data`` (data_width)               the word a read command read, one per read,
                                                      in command order
=========  =====  ==================================  =============================================

As with LiteDRAM, a write command's data may be offered before, with or after the command, but
the memory takes it only after the command (``wdata.ready`` may stay low until then, and the
master must not wait for ``wdata.ready`` before offering the command). A master that cannot
take read data at any time must only issue the reads it has room for: LiteDRAM's controller does
not wait for ``rdata.ready`` (:class:`MemoryModel` does, but the tiles here never rely on it).

:class:`MemoryModel` is the slave side, a synchronous Amaranth memory behind that port, for the
simulators (:mod:`apiary.sim` attaches one to every memory port of a design, through an
:class:`apiary.top.Attachment`) and for tests. Its read latency is a fixed number of cycles or,
as in the Apiary thesis's portability experiment (a random 10-20 cycle delay per memory
operation, services unchanged), drawn per read from a seeded generator
(:func:`random_latencies` is the same draw in Python).
"""

from collections.abc import Iterable, Sequence

from amaranth import Cat, Module, Signal, Mux, Const
from amaranth.hdl import unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out


__all__ = ["MemoryPortSignature", "memory_port_signature", "MemoryModel", "Latency",
           "check_latency", "random_latencies", "read_answer_cycles"]


#: A read latency: a fixed number of cycles, or ``(lo, hi)``, drawn per read from ``[lo, hi]``.
Latency = int | tuple[int, int]

_MASK32 = (1 << 32) - 1


def check_latency(latency: object) -> Latency:
    """``latency`` as a :data:`Latency`: a positive int, or a pair ``(lo, hi)`` of ints with
    ``1 <= lo <= hi`` (a list is taken as a pair; ``(n, n)`` is ``n``).

    Raises
    ------
    ValueError
        Anything else."""
    def positive(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1
    if isinstance(latency, int) and positive(latency):
        return latency
    if isinstance(latency, (tuple, list)) and len(latency) == 2 and all(map(positive, latency)):
        lo, hi = int(latency[0]), int(latency[1])
        if lo <= hi:
            return lo if lo == hi else (lo, hi)
    raise ValueError(f"a memory read latency must be a positive number of cycles or a range "
                     f"(lo, hi) with 1 <= lo <= hi, not {latency!r}")


def _check_seed(seed: object) -> int:
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 1 << 32:
        raise ValueError(f"a memory model's seed must be an integer from 0 to 2**32-1, "
                         f"not {seed!r}")
    return seed


def _seed_state(seed: int) -> int:
    """The generator's first state for ``seed``: a 32-bit mix (so that nearby seeds start far
    apart), never zero."""
    z = (seed + 0x9E3779B9) & _MASK32
    z = ((z ^ (z >> 16)) * 0x85EBCA6B) & _MASK32
    z = ((z ^ (z >> 13)) * 0xC2B2AE35) & _MASK32
    z ^= z >> 16
    return z or 1


def _xorshift32(x: int) -> int:
    x ^= (x << 13) & _MASK32
    x ^= x >> 17
    x ^= (x << 5) & _MASK32
    return x


def random_latencies(lo: int, hi: int, seed: int, count: int) -> list[int]:
    """The first ``count`` latencies ``MemoryModel(latency=(lo, hi), seed=seed)`` draws, one
    per read command it takes, in order.

    The generator is xorshift32 (Marsaglia's 13, 17, 5), started from a mix of ``seed``; read
    *k* draws ``lo + (x_k * (hi - lo + 1) >> 32)`` from its state ``x_k``, uniform on
    ``[lo, hi]`` (to within ``(hi - lo + 1) / 2**32``). The hardware does exactly this, so
    Amaranth's simulator, Verilator and this function agree bit for bit."""
    check_latency((lo, hi))
    _check_seed(seed)
    n = hi - lo + 1
    x = _seed_state(seed)
    out = []
    for _ in range(count):
        out.append(lo + ((x * n) >> 32))
        x = _xorshift32(x)
    return out


def read_answer_cycles(taken: Iterable[int], latencies: Iterable[int]) -> list[int]:
    """The cycles a :class:`MemoryModel` with per-read ``latencies`` answers reads taken on the
    cycles ``taken`` (increasing), when the master keeps ``rdata.ready`` high: each at
    ``max(taken + latency, previous answer + 1)``. Each answer is then ``lo`` to ``hi`` cycles
    after its command (the previous one's is at most ``hi`` after its own, one cycle earlier
    or more)."""
    out: list[int] = []
    for t, d in zip(taken, latencies):
        out.append(max(t + d, out[-1] + 1) if out else t + d)
    return out


class MemoryPortSignature(wiring.Signature):
    """The memory port of :mod:`apiary.os.memory`, master side (see the module docstring).

    Parameters
    ----------
    data_width : int
        Bits per word, a multiple of 8.
    addr_width : int
        Bits of a word address.
    depth_words : int or None
        Words the port addresses (default ``2 ** addr_width``); what a memory model attached to
        the port must hold.

    Two such signatures are equal if their widths and depths are.
    """

    def __init__(self, data_width, addr_width, *, depth_words=None):
        if (not isinstance(data_width, int) or isinstance(data_width, bool) or data_width < 8
                or data_width % 8):
            raise ValueError(f"a memory port's data width must be a positive multiple of 8 bits, "
                             f"not {data_width!r}")
        if not isinstance(addr_width, int) or isinstance(addr_width, bool) or addr_width < 1:
            raise ValueError(f"a memory port's address width must be a positive integer, "
                             f"not {addr_width!r}")
        if depth_words is None:
            depth_words = 1 << addr_width
        if (not isinstance(depth_words, int) or isinstance(depth_words, bool)
                or not 1 <= depth_words <= 1 << addr_width):
            raise ValueError(f"depth_words must be an integer from 1 to 2**addr_width "
                             f"({1 << addr_width}), not {depth_words!r}")
        self.data_width = data_width
        self.addr_width = addr_width
        self.depth_words = depth_words
        super().__init__({
            "cmd": Out(stream.Signature(data.StructLayout({
                "we": unsigned(1), "addr": unsigned(addr_width)}))),
            "wdata": Out(stream.Signature(data.StructLayout({
                "data": unsigned(data_width), "we": unsigned(data_width // 8)}))),
            "rdata": In(stream.Signature(data.StructLayout({
                "data": unsigned(data_width)}))),
        })

    def __eq__(self, other):
        other = other.flip() if type(other) is wiring.FlippedSignature else other
        return (isinstance(other, MemoryPortSignature) and type(other) is type(self)
                and (self.data_width, self.addr_width, self.depth_words)
                == (other.data_width, other.addr_width, other.depth_words))

    def __hash__(self):
        return hash((MemoryPortSignature, self.data_width, self.addr_width, self.depth_words))

    def __repr__(self):
        return (f"MemoryPortSignature({self.data_width}, {self.addr_width}, "
                f"depth_words={self.depth_words})")


def memory_port_signature(data_width, addr_width, *, depth_words=None):
    """The master side of a memory port of ``data_width``-bit words with ``addr_width``-bit word
    addresses: a :class:`MemoryPortSignature`."""
    return MemoryPortSignature(data_width, addr_width, depth_words=depth_words)


class MemoryModel(wiring.Component):
    """A memory behind a :func:`memory_port_signature` port, for simulation.

    ``depth_words`` words of ``data_width`` bits in an :class:`amaranth.lib.memory.Memory`
    (initialised from ``init``, a list of words, zeros after it), so it simulates in Amaranth's
    simulator and converts to Verilog for Verilator.

    Promises:

    * **Reads**: the word of a read command accepted on cycle *t* is valid on ``rdata`` on
      cycle *t* + ``latency`` exactly, as long as the master keeps ``rdata.ready`` high. Reads
      are a pipeline: one command per cycle, up to ``latency`` in flight. If the master holds
      ``rdata.ready`` low, read data waits in a buffer of ``latency + 1`` words and ``cmd`` stops
      taking reads when that many are outstanding; nothing is lost.
    * **Random latency**, ``latency=(lo, hi)``: each read command taken draws its own latency
      *d*, uniform on ``[lo, hi]``, from a 32-bit xorshift generator seeded by ``seed``
      (:func:`random_latencies` gives the same sequence). Reads stay in order: the read taken on
      cycle *t* is answered on ``max(t + d, previous answer + 1)`` (:func:`read_answer_cycles`),
      which is always ``lo`` to ``hi`` cycles after *t*, as long as the master keeps
      ``rdata.ready`` high; up to ``hi`` reads are in flight, and back-pressure is handled as
      above with ``hi`` for ``latency``. The same ``seed`` gives the same draws in every
      simulation and on both back ends (the generator is part of the model's logic). Writes are
      not delayed. A 32-bit cycle count orders the answers: a word held back by the master for
      2**31 cycles would be the first thing to go wrong.
    * **Writes**: a write command is taken whenever fewer than 4 writes wait for their data
      (one per cycle); ``wdata.ready`` is high from the cycle after a write command was taken
      until its data arrives. The word is written with its byte enables (lanes with ``we``
      low keep their contents) on the cycle its data is taken.
    * **Order**: a read command is not taken while a write still waits for its data, so a read
      always sees every write commanded before it; data written on cycle *t* is seen by a
      read accepted on *t* + 1.
    * Addresses at or beyond ``depth_words`` read as zero and ignore writes.

    Throughput: one command per cycle, reads or writes, when the master keeps up.

    **Duplex** (``duplex=True``, a fixed latency only): a second port, ``rport``, takes the
    reads, and ``port`` only the writes (a write command on ``rport`` or a read on ``port`` is
    never taken), as a simple dual-port block RAM has them: one read and one write a cycle,
    with no order between the two ports (a read sees a write to its word only if that word was
    written the cycle before the read was taken or earlier).

    Parameters
    ----------
    data_width, addr_width : int
        The port's word and word-address widths.
    depth_words : int
        Words of storage (at most ``2 ** addr_width``).
    latency : int or (int, int)
        Cycles from a read command's acceptance to its data, at least 1; or ``(lo, hi)``, a
        range ``1 <= lo <= hi`` to draw each read's latency from (``(n, n)`` is ``n``).
    seed : int
        Seeds the random latencies (0 to 2**32-1; unused for a fixed latency).
    init : list of int or None
        Initial contents, word 0 first.
    duplex : bool
        Reads on a port of their own, ``rport`` (above).

    Members
    -------
    port : In(memory_port_signature(data_width, addr_width, depth_words=depth_words))
        The slave side of the port.
    rport : In(memory_port_signature(...))
        With ``duplex``: the read port.
    reads, writes : Out(32)
        Read commands and write data words taken.
    """

    def __init__(self, data_width: int, addr_width: int, *, depth_words: int,
                 latency: Latency = 20, seed: int = 1,
                 init: Sequence[int] | None = None, duplex: bool = False) -> None:
        sig = memory_port_signature(data_width, addr_width, depth_words=depth_words)
        latency = check_latency(latency)
        if not isinstance(duplex, bool):
            raise ValueError(f"duplex must be True or False, not {duplex!r}")
        if duplex and isinstance(latency, tuple):
            raise ValueError("a duplex memory model has a fixed read latency, not a range")
        self.duplex = duplex
        self.seed = _check_seed(seed)
        init = list(init or [])
        if len(init) > depth_words:
            raise ValueError(f"init has {len(init)} words but the memory holds {depth_words}")
        self.data_width, self.addr_width = data_width, addr_width
        self.depth_words, self.latency = depth_words, latency
        self._init = init
        members = {"port": In(sig), "reads": Out(32), "writes": Out(32)}
        if duplex:
            members["rport"] = In(sig)
        super().__init__(members)

    def storage(self, m):
        """The words: ``(write port, read port)`` of a memory in ``m`` (byte-lane write enables;
        reads are synchronous, seeing the contents before a write in the same cycle). A
        subclass may store them otherwise (the Verilator back end does)."""
        m.submodules.storage = storage = Memory(shape=unsigned(self.data_width),
                                                depth=self.depth_words, init=self._init)
        return storage.write_port(granularity=8), storage.read_port()

    @property
    def latency_range(self) -> tuple[int, int]:
        """``(lo, hi)``: the shortest and longest read latency (equal when fixed)."""
        lat = self.latency
        return lat if isinstance(lat, tuple) else (lat, lat)

    def elaborate(self, platform):
        m = Module()
        dw, depth, lat = self.data_width, self.depth_words, self.latency
        wdata = self.port.wdata
        # Reads come on ``rport`` in a duplex model, on ``port`` (with the writes) otherwise.
        cmd, rdata = (self.rport.cmd, self.rport.rdata) if self.duplex else (self.port.cmd,
                                                                             self.port.rdata)
        wcmd = self.port.cmd

        wp, rp = self.storage(m)
        full = depth == 1 << self.addr_width

        def in_range(addr):
            return Const(1) if full else addr < depth

        # -- writes: commands queue their address until the data comes ----------------------------
        m.submodules.write_queue = wq = fifo.SyncFIFO(width=self.addr_width, depth=4)
        wtake = wdata.valid & wq.r_rdy
        m.d.comb += [
            wq.w_data.eq(wcmd.payload.addr),
            wq.w_en.eq(wcmd.valid & wcmd.payload.we),
            wdata.ready.eq(wq.r_rdy),
            wq.r_en.eq(wdata.valid),
            wp.addr.eq(wq.r_data),
            wp.data.eq(wdata.payload.data),
        ]
        with m.If(wtake & in_range(wq.r_data)):
            m.d.comb += wp.en.eq(wdata.payload.we)
        with m.If(wtake):
            m.d.sync += self.writes.eq(self.writes + 1)

        if isinstance(lat, tuple):
            self._random_reads(m, rp, wq, in_range)
            return m

        # -- reads: a pipeline of `lat` stages, then a bypassable buffer -------------------------
        outstanding = Signal(range(lat + 2))        # reads taken, data not yet delivered
        if self.duplex:
            # Two ports, no order between them: writes on ``port``, reads on ``rport``.
            read_ok = outstanding < lat + 1
            m.d.comb += [wcmd.ready.eq(wcmd.payload.we & wq.w_rdy),
                         cmd.ready.eq(~cmd.payload.we & read_ok),
                         self.port.rdata.valid.eq(0), self.rport.wdata.ready.eq(0)]
        else:
            read_ok = ~wq.r_rdy & (outstanding < lat + 1)
            m.d.comb += cmd.ready.eq(Mux(cmd.payload.we, wq.w_rdy, read_ok))
        accept = cmd.valid & cmd.ready & ~cmd.payload.we
        m.d.comb += [rp.addr.eq(cmd.payload.addr), rp.en.eq(accept)]
        first_ok = Signal()
        m.d.sync += first_ok.eq(in_range(cmd.payload.addr))
        valid = Signal(name="stage1_valid")
        word = Signal(dw, name="stage1_data")
        m.d.sync += valid.eq(accept)
        m.d.comb += word.eq(Mux(first_ok, rp.data, 0))
        for k in range(2, lat + 1):
            v, d = Signal(name=f"stage{k}_valid"), Signal(dw, name=f"stage{k}_data")
            m.d.sync += [v.eq(valid), d.eq(word)]
            valid, word = v, d

        m.submodules.read_buffer = rb = fifo.SyncFIFO(width=dw, depth=lat + 1)
        m.d.comb += [
            rdata.valid.eq(rb.r_rdy | valid),
            rdata.payload.data.eq(Mux(rb.r_rdy, rb.r_data, word)),
            rb.r_en.eq(rdata.ready),
            rb.w_data.eq(word),
            rb.w_en.eq(valid & (rb.r_rdy | ~rdata.ready)),
        ]
        delivered = rdata.valid & rdata.ready
        m.d.sync += outstanding.eq(outstanding + accept - delivered)
        with m.If(accept):
            m.d.sync += self.reads.eq(self.reads + 1)
        return m

    def _random_reads(self, m, rp, wq, in_range):
        """Reads with a latency drawn per read (``latency=(lo, hi)``): each read taken is
        stamped with the cycle its word is due, and its word waits for that cycle in a buffer
        (bypassed when it is due as it is read)."""
        dw = self.data_width
        lo, hi = self.latency_range
        n = hi - lo + 1
        cmd, rdata = self.port.cmd, self.port.rdata

        now = Signal(32)                            # the cycle count (wraps)
        m.d.sync += now.eq(now + 1)

        # The generator: xorshift32, one step per read taken (see random_latencies).
        state = Signal(32, init=_seed_state(self.seed))
        s1, s2, s3 = Signal(32), Signal(32), Signal(32)
        m.d.comb += [
            s1.eq(state ^ (state << 13)[:32]),
            s2.eq(s1 ^ (s1 >> 17)),
            s3.eq(s2 ^ (s2 << 5)[:32]),
        ]
        draw = Signal(range(hi + 1))
        m.d.comb += draw.eq(lo + (state * n)[32:])

        # ahead: cycles from now to the answer of the last read taken (0 if due or past), so a
        # read taken now is due max(draw, ahead + 1) cycles from now: in order, one a cycle.
        outstanding = Signal(range(hi + 2))         # reads taken, data not yet delivered
        read_ok = ~wq.r_rdy & (outstanding < hi + 1)
        m.d.comb += cmd.ready.eq(Mux(cmd.payload.we, wq.w_rdy, read_ok))
        accept = cmd.valid & cmd.ready & ~cmd.payload.we
        m.d.comb += [rp.addr.eq(cmd.payload.addr), rp.en.eq(accept)]

        ahead = Signal(range(hi + 1))
        due_in = Signal(range(hi + 1))
        m.d.comb += due_in.eq(Mux(draw > ahead, draw, ahead + 1))
        with m.If(accept):
            m.d.sync += [ahead.eq(due_in - 1), state.eq(s3)]
        with m.Elif(ahead != 0):
            m.d.sync += ahead.eq(ahead - 1)

        # The read port's word, a cycle after the command, with its due cycle.
        s_valid, s_ok, s_due = Signal(), Signal(), Signal(32)
        m.d.sync += [s_valid.eq(accept), s_ok.eq(in_range(cmd.payload.addr)),
                     s_due.eq(now + due_in)]
        word = Signal(dw)
        m.d.comb += word.eq(Mux(s_ok, rp.data, 0))

        m.submodules.read_buffer = rb = fifo.SyncFIFO(width=dw + 32, depth=hi + 1)
        head_data, head_due = Signal(dw), Signal(32)
        m.d.comb += [
            head_data.eq(Mux(rb.r_rdy, rb.r_data[:dw], word)),
            head_due.eq(Mux(rb.r_rdy, rb.r_data[dw:], s_due)),
        ]
        late = Signal(32)
        due = Signal()
        m.d.comb += [late.eq(now - head_due), due.eq(~late[31])]
        m.d.comb += [
            rdata.valid.eq((rb.r_rdy | s_valid) & due),
            rdata.payload.data.eq(head_data),
            rb.r_en.eq(rdata.ready & due),
            rb.w_data.eq(Cat(word, s_due)),
            rb.w_en.eq(s_valid & (rb.r_rdy | ~(due & rdata.ready))),
        ]
        delivered = rdata.valid & rdata.ready
        m.d.sync += outstanding.eq(outstanding + accept - delivered)
        with m.If(accept):
            m.d.sync += self.reads.eq(self.reads + 1)
