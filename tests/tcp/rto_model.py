"""A reference of TCP's retransmission timeout, written from RFC 6298 and nothing else: the
smoothed round trip and its variation from each sample, the timeout from them, Karn's rule for
which segments are timed. The transmit engine (beehive/proto/tcp/tx.py) must agree with it
sample by sample (tests/tcp/test_rto.py). Time is in the engine's timer ticks; sequence
numbers are 32-bit, compared modulo 2**32.

Where the RFC leaves a choice, the choice made (and said in the engine's docstring):
- the round trip is kept in fixed point, SRTT in eighths and RTTVAR in quarters of a tick,
  each update truncating (RFC 6298 §2 does not say how; Linux keeps them so);
- the clock granularity G is one tick;
- RTO is kept within ``floor`` and ``ceiling`` (§2.4 rounds it up to 1 s, which the engine's
  configuration scales as ``rto_min``; §2.5 allows a maximum);
- one segment is timed at a time, new data only, the first sent when none is timed (§3 and
  Karn's algorithm: a retransmission ends the timing, since its ACK cannot tell which sending
  it answers);
- before the first sample the timeout is the initial one (§2.1).
"""

from dataclasses import dataclass

from newreno_model import seq_le


@dataclass
class Rto:
    """One connection's timer state: ``initial``, ``floor`` and ``ceiling`` in ticks."""
    initial: int
    floor: int
    ceiling: int
    srtt8: int = 0              # SRTT, eighths of a tick
    rttvar4: int = 0            # RTTVAR, quarters of a tick
    rto: int = 0                # 0: no sample yet
    timed: tuple[int, int] | None = None     # (the timed segment's end, when it was sent)

    @property
    def timeout(self) -> int:
        return self.rto or self.initial

    def sent(self, end: int, now: int, retransmission: bool) -> None:
        """A data segment ending at ``end`` sent at tick ``now``."""
        if retransmission:
            self.timed = None
        elif self.timed is None:
            self.timed = (end, now)

    def timed_out(self) -> None:
        """The retransmission timer expired (what is resent is a retransmission)."""
        self.timed = None

    def acked(self, ack: int, now: int) -> int | None:
        """An ACK of new data up to ``ack`` at tick ``now``; returns the sample it gave."""
        if self.timed is None or not seq_le(self.timed[0], ack):
            return None
        sample = now - self.timed[1]
        self.timed = None
        if self.rto == 0:                        # §2.2
            self.srtt8, self.rttvar4 = 8 * sample, 2 * sample
        else:                                    # §2.3: RTTVAR with the SRTT before
            delta = sample - self.srtt8 // 8
            self.rttvar4 = self.rttvar4 - self.rttvar4 // 4 + abs(delta)
            self.srtt8 = self.srtt8 + delta
        rto = self.srtt8 // 8 + max(1, self.rttvar4)             # SRTT + max(G, 4 RTTVAR)
        self.rto = min(max(rto, self.floor), self.ceiling)       # §2.4, §2.5
        return sample
