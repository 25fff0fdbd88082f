"""A reference of SACK loss recovery, written from RFC 6675 (with RFC 5681's slow start and
congestion avoidance from :mod:`newreno_model`): the scoreboard of SACKed ranges, IsLost,
SetPipe, NextSeg and the recovery steps. It says which segments a sender sends after each ACK;
the transmit engine (beehive/proto/tcp/tx.py) must send the same, in the same order, with the
same cwnd, ssthresh and recovery point (tests/tcp/test_sack_recovery.py). Offsets are from the
first data byte (no wrap: the test maps them onto the engine's wrapping sequence numbers).

Where RFC 6675 leaves a choice, or the engine keeps less than a whole scoreboard, the choice
made (said in the engine's docstring too):
- recovery starts on the third duplicate ACK or when IsLost(HighACK + 1), and, as RFC 6582's
  recovery point has it, not again before HighACK passes the last recovery point;
- a partial ACK resends the hole at HighACK at once, outside the pipe (RFC 6582's step 4, which
  RFC 6675 leaves to NextSeg);
- NextSeg's rules (3) and (4) (an unSACKed segment not lost, the rescue retransmission) are not
  modelled: the scripts always have new data, which rule (2) sends first;
- the engine knows the first SACKed range, the highest SACKed byte and the bytes SACKed in
  all: the scripts keep to losses that this tells exactly (at most two holes, each one segment
  or the first of several before the first range). :meth:`SackRecovery.pipe` and
  :meth:`SackRecovery.is_lost` are the RFC's, over the whole scoreboard; the engine's IsLost
  counts bytes only (three discontiguous SACKed ranges of whole segments are more than two
  segments' worth, so the two agree on such scripts).
"""

from dataclasses import dataclass, field

from newreno_model import MOD, NewReno


def merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` (``(start, end)``, ends exclusive) as the fewest disjoint ranges, in order."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        elif start < end:
            out.append((start, end))
    return out


@dataclass
class SackRecovery(NewReno):
    """One connection's sender: NewReno's congestion state outside recovery, RFC 6675's in it.
    ``una`` is HighACK, ``nxt`` HighData, ``tail`` the data written, ``rwnd`` the peer's
    window; ``high_rxt`` is one past HighRxt."""
    una: int = 0
    nxt: int = 0
    tail: int = 0
    rwnd: int = MOD - 1
    high_rxt: int = 0
    syn: bool = True        # the first new ACK covers the SYN's byte too (counted, as NewReno's)
    scoreboard: list[tuple[int, int]] = field(default_factory=list)

    # -- the scoreboard (RFC 6675 §3-4) ---------------------------------------------------

    def update(self, ack: int, blocks: list[tuple[int, int]]) -> None:
        """Take an ACK: what it and its SACK blocks say the peer holds."""
        self.una = max(self.una, ack)
        self.high_rxt = max(self.high_rxt, self.una)
        self.scoreboard = merged([(max(s, self.una), e) for s, e in self.scoreboard + blocks])

    def sacked(self, octet: int) -> bool:
        return any(s <= octet < e for s, e in self.scoreboard)

    def is_lost(self, octet: int) -> bool:
        """DupThresh (3) discontiguous SACKed ranges above ``octet``, or more than
        (DupThresh - 1) * SMSS bytes SACKed above it."""
        above = [(max(s, octet + 1), e) for s, e in self.scoreboard if e > octet + 1]
        return len(above) >= 3 or sum(e - s for s, e in above) > 2 * self.smss

    def pipe(self) -> int:
        """SetPipe: each unSACKed octet from HighACK to HighData counts once if not lost, and
        once more if retransmitted."""
        pipe = 0
        for octet in range(self.una, self.nxt):
            if not self.sacked(octet):
                pipe += (not self.is_lost(octet)) + (octet < self.high_rxt)
        return pipe

    def _hole_segment(self, start: int) -> tuple[int, int]:
        """Up to SMSS bytes from ``start``, short of the next SACKed byte and of HighData."""
        end = min([self.nxt, start + self.smss] + [s for s, _ in self.scoreboard if s > start])
        return start, end - start

    def _next_lost(self) -> int | None:
        """NextSeg's rule (1): the first unSACKed octet past HighRxt, below the highest SACKed
        one, that is lost."""
        if not self.scoreboard:
            return None
        for octet in range(self.high_rxt, self.scoreboard[-1][1]):
            if not self.sacked(octet) and self.is_lost(octet):
                return octet
        return None

    # -- sending ----------------------------------------------------------------------------

    def _send(self, seg: tuple[int, int], sent: list[tuple[int, int]], rtx: bool) -> None:
        sent.append(seg)
        if rtx:
            self.high_rxt = seg[0] + seg[1]
        else:
            self.nxt = seg[0] + seg[1]

    def _send_window(self, sent: list[tuple[int, int]]) -> None:
        """Outside recovery: new data as far as cwnd and the peer's window let it."""
        limit = min(self.una + min(self.cwnd, self.rwnd), self.tail)
        while self.nxt < limit:
            self._send((self.nxt, min(self.smss, limit - self.nxt)), sent, False)

    def _send_pipe(self, sent: list[tuple[int, int]]) -> None:
        """RFC 6675 §5 (C): while cwnd - pipe >= SMSS, NextSeg."""
        while self.cwnd - self.pipe() >= self.smss:
            lost = self._next_lost()
            if lost is not None:                                        # rule (1)
                self._send(self._hole_segment(lost), sent, True)
            elif self.nxt < min(self.tail, self.una + self.rwnd):         # rule (2)
                self._send((self.nxt, min(self.smss, self.tail - self.nxt,
                                          self.una + self.rwnd - self.nxt)), sent, False)
            else:
                break

    def _resend_first_hole(self, sent: list[tuple[int, int]]) -> None:
        """The hole at HighACK (or on from HighRxt within it), outside the pipe: on entering
        recovery (RFC 6675 step 4.3) and after a partial ACK."""
        start = max(self.una, self.high_rxt)
        first_sacked = self.scoreboard[0][0] if self.scoreboard else self.nxt
        if start < first_sacked and (self.scoreboard or start == self.una):
            self._send(self._hole_segment(start), sent, True)
        elif (lost := self._next_lost()) is not None:
            self._send(self._hole_segment(lost), sent, True)

    # -- events -------------------------------------------------------------------------------

    def ack(self, ack: int, blocks: list[tuple[int, int]], dupacks: int) -> list[tuple[int, int]]:
        """An ACK of ``ack`` with SACK ``blocks`` (``dupacks``: its count of duplicates in a
        row, 0 if it acknowledges new data); returns the segments sent after it, ``(offset,
        length)``, in order."""
        sent: list[tuple[int, int]] = []
        una = self.una
        self.update(ack, blocks)
        if ack > una:
            if self.in_recovery and ack >= self.recover:                 # a full ACK
                self.in_recovery = False
                self.cwnd = self.ssthresh
            elif self.in_recovery:                                      # a partial ACK
                self._resend_first_hole(sent)
            else:
                self.new_ack(ack, una - self.syn)
            self.syn = False
        elif dupacks and not self.in_recovery and self.una > self.recover and (
                dupacks == 3 or self.is_lost(self.una)):
            self.ssthresh = self.cwnd = max((self.nxt - self.una) // 2, 2 * self.smss)
            self.recover = self.nxt
            self.in_recovery = True
            self.high_rxt = self.una
            self._resend_first_hole(sent)
        if self.in_recovery:
            self._send_pipe(sent)
        else:
            self._send_window(sent)
        return sent

    def write(self, tail: int) -> list[tuple[int, int]]:
        """The application has written up to ``tail``."""
        self.tail = tail
        sent: list[tuple[int, int]] = []
        self._send_window(sent)
        return sent
