"""A streaming Reed-Solomon erasure-code encoder: RS(8,2) over GF(2^8), as ``reedsolo`` codes.

A *request* is ``data`` (8) data shards of ``shard_bytes`` (*S*) bytes each, sent back to back as
one packet on a payload stream (:mod:`apiary.stream.layout`): shard 0's *S* bytes, then shard
1's, and so on, ``data * S`` bytes in all. The *answer* is ``parity`` (2) parity shards of *S*
bytes, sent as one packet: parity shard 0, then parity shard 1, ``last`` on its final word.

=============  ===============  =========================================================
packet         bytes            contents
=============  ===============  =========================================================
request (in)   ``data * S``     ``shard_0 | shard_1 | ... | shard_7``
answer (out)   ``parity * S``   ``parity_0 | parity_1``
=============  ===============  =========================================================

Byte *k* of the parity shards are the parity symbols of the 8-symbol message
``(shard_0[k], ..., shard_7[k])`` exactly as ``reedsolo.RSCodec(2)`` computes them (its
defaults: GF(2^8) with primitive polynomial ``0x11d``, generator 2, first consecutive root
``fcr = 0``), i.e. ``RSCodec(2).encode(bytes(column))[8:]``: the remainder of
``message(x) * x^2`` divided by the generator polynomial ``(x - 1)(x - 2)``, the message's first
symbol the highest power. Parity is linear in the data: ``parity_j[k] = XOR_i c[j][i] *
shard_i[k]`` with the constants of :func:`parity_coefficients`.

Timing of :class:`RsEncoder` (``n = S / (width // 8)`` words per shard; one word per cycle in
and out; cycles counted between the clock edges at which words are taken). **Latency**: a
request's first parity word is valid on ``o`` 2 cycles after the cycle its last data word is
taken; with ``o`` ready, an isolated request's last parity word is taken ``10 * n`` cycles after
its first data word. **Throughput**: with ``o`` ready, requests are taken back to back with no
idle cycle on ``i``, ``8 * n`` cycles per request (the answer to one request leaves while the
next request's first 7 shards come in; a final shard waits only while the previous answer is
still unsent): ``width // 8`` input bytes per cycle, 64 B/cycle at 512 bits. Storage: ``4 * n``
words (accumulators and output buffer for 2 parity shards).

* Python model: :func:`gf_mul`, :func:`generator_polynomial`, :func:`parity_coefficients`,
  :func:`encode_shards` (the reference the hardware is tested against).
* Hardware: :func:`gf_mul_const` (a word of bytes times a constant: an XOR network per byte
  lane) and :class:`RsEncoder` (the streaming core; its docstring gives latency and
  throughput).
"""

from typing import Any

from amaranth import Const, Module, Mux, Signal, Value
from amaranth.hdl import ValueLike
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from apiary.stream.counters import CounterSignature
from apiary.stream.layout import check_width, payload_signature
from apiary.stream.counters import count


__all__ = ["GF_POLYNOMIAL", "gf_mul", "generator_polynomial", "parity_coefficients",
           "encode_shards", "gf_mul_const", "check_shard_bytes", "RsEncoder"]


#: The primitive polynomial of GF(2^8): x^8 + x^4 + x^3 + x^2 + 1 (``reedsolo``'s default).
GF_POLYNOMIAL = 0x11D


# -- Python model -------------------------------------------------------------------------------

def gf_mul(a: int, b: int) -> int:
    """``a * b`` in GF(2^8) modulo :data:`GF_POLYNOMIAL` (bytes as polynomials over GF(2))."""
    product = 0
    while b:
        if b & 1:
            product ^= a
        b >>= 1
        a <<= 1
        if a & 0x100:
            a ^= GF_POLYNOMIAL
    return product


def _check_code(data: int, parity: int) -> None:
    for name, value in (("data", data), ("parity", parity)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"Reed-Solomon: {name} must be a positive integer (shards), "
                             f"not {value!r}")
    if data + parity > 255:
        raise ValueError(f"Reed-Solomon: data + parity must be at most 255 over GF(2^8), "
                         f"not {data} + {parity}")


def generator_polynomial(parity: int = 2) -> list[int]:
    """The generator polynomial ``(x - 2^0)(x - 2^1)...(x - 2^(parity-1))``, its coefficients
    from the highest power down (monic: the first is 1), as ``reedsolo.rs_generator_poly``."""
    _check_code(1, parity)
    gen, root = [1], 1
    for _ in range(parity):
        # gen * (x + root): subtraction is addition in characteristic 2.
        gen = [a ^ gf_mul(b, root) for a, b in zip(gen + [0], [0] + gen)]
        root = gf_mul(root, 2)
    return gen


def _remainder(message: list[int], gen: list[int]) -> list[int]:
    """The parity symbols of ``message``: ``message(x) * x^parity mod gen(x)``, as the shift
    register of the hardware computes them (one message symbol per step)."""
    parity = len(gen) - 1
    reg = [0] * parity
    for symbol in message:
        feedback = symbol ^ reg[0]
        reg = [r ^ gf_mul(g, feedback) for r, g in zip(reg[1:] + [0], gen[1:])]
    return reg


def parity_coefficients(data: int = 8, parity: int = 2) -> list[list[int]]:
    """``c[j][i]``: parity symbol ``j`` of a message is ``XOR_i c[j][i] * message[i]``.

    Column ``i`` is the parity of the message that is 1 at symbol ``i`` and 0 elsewhere.
    """
    _check_code(data, parity)
    gen = generator_polynomial(parity)
    columns = [_remainder([int(i == s) for s in range(data)], gen) for i in range(data)]
    return [[columns[i][j] for i in range(data)] for j in range(parity)]


def encode_shards(shards: list[bytes], parity: int = 2) -> list[bytes]:
    """The ``parity`` parity shards of the data shards ``shards`` (all of one length): byte
    ``k`` of them is ``RSCodec(parity).encode(bytes(s[k] for s in shards))[len(shards):]``."""
    shards = [bytes(s) for s in shards]
    _check_code(len(shards), parity)
    size = len(shards[0])
    if any(len(s) != size for s in shards):
        raise ValueError(f"Reed-Solomon: shards must be of one length, not "
                         f"{[len(s) for s in shards]}")
    coefficients = parity_coefficients(len(shards), parity)
    out = []
    for row in coefficients:
        shard = bytearray(size)
        for c, data_shard in zip(row, shards):
            for k, byte in enumerate(data_shard):
                shard[k] ^= gf_mul(c, byte)
        out.append(bytes(shard))
    return out


# -- Hardware -----------------------------------------------------------------------------------

def _lanes_mask(byte: int, width: int) -> int:
    return int.from_bytes(bytes([byte]) * (width // 8), "little")


def gf_mul_const(value: ValueLike, c: int, width: int) -> Value:
    """Each byte lane of the ``width``-bit ``value`` times the constant ``c`` in GF(2^8).

    Multiplying by a constant is linear over GF(2): bit ``b`` of a lane's product is the XOR of
    the lane's bits ``a`` for which ``c * 2^a`` has bit ``b``, an XOR network of at most 8
    inputs per bit. It is written word-wide, one masked and shifted copy of ``value`` per
    distance ``b - a`` (the masks keep every bit inside its lane), so the expression stays flat.
    """
    if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= 255:
        raise ValueError(f"gf_mul_const: c must be a byte, not {c!r}")
    value = Value.cast(value)
    result: Value = Const(0, width)
    for d in range(-7, 8):
        mask = sum(1 << a for a in range(8)
                   if 0 <= a + d < 8 and gf_mul(c, 1 << a) >> (a + d) & 1)
        if mask:
            term = value & _lanes_mask(mask, width)
            result = result ^ (term << d if d >= 0 else term >> -d)[:width]
    return result[:width]


def check_shard_bytes(width: int, shard_bytes: Any, who: str = "RsEncoder") -> int:
    """``shard_bytes``, once checked to be a positive multiple of a ``width``-bit word (a
    ``ValueError`` naming ``who`` otherwise)."""
    nb = width // 8
    if (isinstance(shard_bytes, bool) or not isinstance(shard_bytes, int)
            or shard_bytes < 1 or shard_bytes % nb):
        raise ValueError(f"{who}: shard_bytes must be a positive multiple of {nb} (one "
                         f"{width}-bit word), not {shard_bytes!r}")
    return shard_bytes


class RsEncoder(wiring.Component):
    """Reed-Solomon (``data`` + ``parity``) erasure-code encoder on payload streams.

    **In** (``i``): requests, each ``data`` shards of ``shard_bytes`` bytes back to back (see
    the module's docstring), ``n = shard_bytes / (width // 8)`` full words per shard. A packet
    of any other length or shape (a word before ``last`` not full, a last word not full, an
    empty or aborted packet, ``last`` too early or missing at the request's final word) is
    taken whole and dropped, counted once in ``bad_length`` at its ``last`` word; the next
    packet starts a new request.

    **Out** (``o``): per request, ``parity`` parity shards as one packet of ``parity * n`` full
    words, ``last`` on the final one. Requests are answered in order.

    **How.** Parity accumulates per word position in a shift register over GF(2^8) (the
    division by the generator polynomial, :func:`generator_polynomial`) whose state lives in
    memories: per parity shard ``j`` one accumulator ``Memory`` of ``n`` words (word ``w``
    holds parity ``j`` of the columns of word position ``w`` so far). Each input word of shard
    ``i``, position ``w``, is a read-modify-write of position ``w`` of every accumulator:
    ``feedback = word ^ acc_0[w]``, ``acc_j[w] = acc_{j+1}[w] ^ g_{j+1} * feedback``
    (``acc_parity`` reading as 0), with fixed constants ``g`` (:func:`gf_mul_const`: XOR
    networks per byte lane) and shard 0 reading the accumulators as 0 (no clearing pass). Two
    pipeline stages: in the cycle a word is taken its position's accumulators are read
    (synchronous read ports, transparent to the write ports: with one word per shard the next
    word reads the position written in that cycle); in the next cycle the new values are
    written. The final shard's results are written instead to per-parity output memories of
    ``n`` words, from which ``o`` is read (the read ports' data registers are the output
    register). The output memories are a second buffer: the next request's shards 0 to
    ``data - 2`` are taken while the previous answer is being sent; only the words of a final
    shard wait (``i.ready`` low) while an answer is still unsent. ``i.ready`` depends on the
    core's state only, never on ``o.ready`` in the same cycle.

    **Latency**: the first word of an answer is valid on ``o`` 2 cycles after the cycle its
    request's last word is taken on ``i``; with ``o.ready`` high its words then leave one per
    cycle, so an isolated request's last parity word is taken ``(data + parity) * n`` cycles
    after its first data word (RS(8,2): ``10 * n``).

    **Throughput**: one input word per cycle. With ``o`` always ready, back-to-back requests
    take ``max(data * n, (parity + 1) * n + 1)`` cycles each, which for RS(8,2) is ``8 * n``:
    no idle cycle on ``i`` between requests, ``width // 8`` input bytes per cycle (64 B/cycle
    at 512 bits) and ``parity / data`` of that out.

    Parameters
    ----------
    width : int
        Word width in bits (64, 128, 256 or 512).
    shard_bytes : int
        Bytes per shard: a positive multiple of ``width // 8`` (so every shard is whole words;
        the core does not realign shards that share a word).
    data, parity : int
        Shards of data and of parity: at least 1 each, at most 255 together. Default RS(8,2).

    Members
    -------
    i : In(payload_signature(width))
        Requests: the data shards, one packet each.
    o : Out(payload_signature(width))
        Answers: the parity shards, one packet each.
    counters : Out(CounterSignature)
        ``requests`` (requests taken whole, each answered on ``o``) and ``bad_length``
        (packets dropped).

    Attributes
    ----------
    shard_words : int
        ``n``, words per shard.
    latency : int
        2: cycles from a request's last word in to its answer's first word out.
    request_cycles : int
        Cycles per request back to back with ``o`` always ready (see Throughput).

    Raises
    ------
    ValueError
        If the width is not supported, ``shard_bytes`` is not a positive multiple of
        ``width // 8``, or ``data``/``parity`` are out of range.
    """

    latency = 2

    def __init__(self, width: int, shard_bytes: int, *, data: int = 8, parity: int = 2) -> None:
        self._width = check_width(width)
        nb = width // 8
        check_shard_bytes(width, shard_bytes)
        _check_code(data, parity)
        self.shard_bytes = shard_bytes
        self.shard_words = n = shard_bytes // nb
        self.data = data
        self.parity = parity
        self.request_cycles = max(data * n, (parity + 1) * n + 1)
        super().__init__({
            "i": In(payload_signature(width)),
            "o": Out(payload_signature(width)),
            "counters": Out(CounterSignature({
                "requests": "requests taken whole (each answered on o)",
                "bad_length": "packets dropped: not data * shard_bytes bytes of full words",
            })),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width, n, k, p = self._width, self.shard_words, self.data, self.parity
        nb = width // 8
        gen = generator_polynomial(p)

        acc_w, acc_r, out_w, out_r = [], [], [], []
        for j in range(p):
            acc = Memory(shape=width, depth=n, init=[])
            out = Memory(shape=width, depth=n, init=[])
            m.submodules[f"acc{j}"], m.submodules[f"out{j}"] = acc, out
            acc_w.append(acc.write_port())
            acc_r.append(acc.read_port(transparent_for=(acc_w[j],)))
            out_w.append(out.write_port())
            out_r.append(out.read_port(transparent_for=(out_w[j],)))

        # -- input: word position, shard, dropping a bad packet ---------------------------------
        word = Signal(range(n))
        shard = Signal(range(k))
        dropping = Signal()
        busy = Signal()             # an answer is in the output memories, not all sent
        final_shard = shard == k - 1
        m.d.comb += self.i.ready.eq(dropping | ~(busy & final_shard))
        for port in acc_r:
            m.d.comb += port.addr.eq(word)          # always enabled: data of the word taken

        # Stage 1 (the cycle after a word is taken): read data is there; write back.
        s1_valid, s1_first, s1_final = Signal(), Signal(), Signal()
        s1_addr = Signal(range(n))
        s1_data = Signal(width)
        m.d.sync += s1_valid.eq(0)

        counters = self.counters
        payload = self.i.payload
        full = payload.nbytes == nb
        final_pos = final_shard & (word == n - 1)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [
                s1_valid.eq(~dropping),
                s1_first.eq(shard == 0),
                s1_final.eq(final_shard),
                s1_addr.eq(word),
                s1_data.eq(payload.data),
            ]
            with m.If(dropping):
                with m.If(payload.last):
                    m.d.sync += [dropping.eq(0), counters.bad_length.eq(counters.bad_length + 1)]
            with m.Elif(final_pos & payload.last & full):
                m.d.sync += [word.eq(0), shard.eq(0), busy.eq(1),
                             counters.requests.eq(counters.requests + 1)]
            with m.Elif(~full | payload.last | final_pos):
                m.d.sync += [word.eq(0), shard.eq(0)]
                with m.If(payload.last):
                    count(m, counters.bad_length)
                with m.Else():
                    m.d.sync += dropping.eq(1)
            with m.Elif(word == n - 1):
                m.d.sync += [word.eq(0), shard.eq(shard + 1)]
            with m.Else():
                m.d.sync += word.eq(word + 1)

        # The shift register step, per byte lane: feedback = d ^ r_0, r_j = r_{j+1} ^ g_{j+1} * f.
        reg = [Mux(s1_first, 0, port.data) for port in acc_r] + [Const(0, width)]
        feedback = Signal(width)
        m.d.comb += feedback.eq(s1_data ^ reg[0])
        for j in range(p):
            new = Signal(width, name=f"new{j}")
            m.d.comb += new.eq(reg[j + 1] ^ gf_mul_const(feedback, gen[j + 1], width))
            m.d.comb += [
                acc_w[j].addr.eq(s1_addr), acc_w[j].data.eq(new),
                acc_w[j].en.eq(s1_valid & ~s1_final),
                out_w[j].addr.eq(s1_addr), out_w[j].data.eq(new),
                out_w[j].en.eq(s1_valid & s1_final),
            ]

        # -- output: parity 0's n words, then parity 1's, ... -----------------------------------
        ptr = Signal(range(n))
        par = Signal(range(p))
        issued = Signal()           # every word of the answer read (the last may still wait)
        sel = Signal(range(p))
        o_valid, o_last = Signal(), Signal()
        advance = ~o_valid | self.o.ready
        for port in out_r:
            m.d.comb += [port.addr.eq(ptr), port.en.eq(advance)]
        with m.If(advance):
            with m.If(busy & ~issued):
                m.d.sync += [o_valid.eq(1), sel.eq(par),
                             o_last.eq((par == p - 1) & (ptr == n - 1))]
                with m.If(ptr == n - 1):
                    m.d.sync += ptr.eq(0)
                    with m.If(par == p - 1):
                        m.d.sync += [par.eq(0), issued.eq(1)]
                    with m.Else():
                        m.d.sync += par.eq(par + 1)
                with m.Else():
                    m.d.sync += ptr.eq(ptr + 1)
            with m.Else():
                m.d.sync += o_valid.eq(0)
        with m.If(o_valid & self.o.ready & o_last):
            m.d.sync += [busy.eq(0), issued.eq(0)]

        out_data: Value = out_r[0].data
        for j in range(1, p):
            out_data = Mux(sel == j, out_r[j].data, out_data)
        m.d.comb += [
            self.o.valid.eq(o_valid),
            self.o.payload.data.eq(out_data),
            self.o.payload.nbytes.eq(nb),
            self.o.payload.last.eq(o_last),
        ]
        return m
