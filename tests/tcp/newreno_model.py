"""A reference of TCP's congestion control, written from the RFCs and nothing else: RFC 5681
(slow start, congestion avoidance with byte counting, the loss window after a timeout) and RFC
6582 (NewReno's fast recovery: the recovery point, partial and full ACKs). The transmit engine's
congestion state (beehive/proto/tcp/tx.py) must equal it event by event
(tests/tcp/test_newreno.py). Sequence numbers are 32-bit and compared modulo 2**32.

Where the RFCs leave a choice, the choice made (and said in the engine's docstring):
- congestion avoidance counts bytes (RFC 5681 §3.1, the RECOMMENDED way): the bytes newly
  acknowledged add up, and when they reach cwnd, cwnd grows by SMSS and cwnd is taken off;
- a full ACK sets cwnd to ssthresh (RFC 6582 §3.2 step 3, its first option);
- a partial ACK deflates cwnd by the bytes it acknowledges and adds back SMSS (step 4), never
  below SMSS;
- bytes acknowledged are sequence space: an ACK that covers the SYN counts it as one byte
  (the RFCs count only data; the difference is at most one byte of cwnd per connection);
- after a retransmission timeout, recover is the highest sequence number sent (RFC 6582 §4),
  and the byte count starts again.
"""

from dataclasses import dataclass

MOD = 1 << 32


def seq_lt(a: int, b: int) -> bool:
    return 0 < (b - a) % MOD < MOD // 2


def seq_le(a: int, b: int) -> bool:
    return a == b or seq_lt(a, b)


@dataclass
class NewReno:
    """One connection's congestion state; ``smss`` the sender's maximum segment size."""
    smss: int
    cwnd: int
    ssthresh: int
    recover: int
    in_recovery: bool = False
    bytes_acked: int = 0

    @classmethod
    def opened(cls, smss: int, initial_window: int, iss: int) -> "NewReno":
        """At the connection's start: IW segments (RFC 5681 §3.1 lets IW be set by the
        implementation), ssthresh arbitrarily high, recover the initial sequence number (RFC
        6582 §3.2 step 1)."""
        return cls(smss, initial_window * smss, MOD - 1, iss)

    def _half_flight(self, snd_una: int, snd_max: int) -> int:
        """RFC 5681 equation (4): max(FlightSize / 2, 2 * SMSS)."""
        return max(((snd_max - snd_una) % MOD) // 2, 2 * self.smss)

    def new_ack(self, ack: int, snd_una: int) -> None:
        """An ACK that acknowledges new data (``ack`` past ``snd_una``)."""
        acked = (ack - snd_una) % MOD
        if self.in_recovery:
            if seq_le(self.recover, ack):            # full ACK: leave fast recovery
                self.in_recovery = False
                self.cwnd = self.ssthresh
            else:                                    # partial ACK: deflate, add back SMSS
                self.cwnd = self.cwnd - acked + self.smss if self.cwnd > acked else self.smss
        elif self.cwnd < self.ssthresh:              # slow start: at most SMSS per ACK
            self.cwnd += min(acked, self.smss)
        else:                                        # congestion avoidance, bytes counted
            self.bytes_acked += acked
            if self.bytes_acked >= self.cwnd:
                self.bytes_acked -= self.cwnd
                self.cwnd += self.smss

    def duplicate_ack(self, count: int, snd_una: int, snd_max: int) -> None:
        """The ``count``-th duplicate ACK in a row."""
        if count == 3 and not self.in_recovery and seq_lt(self.recover, snd_una):
            self.ssthresh = self._half_flight(snd_una, snd_max)   # fast retransmit
            self.cwnd = self.ssthresh + 3 * self.smss
            self.recover = snd_max
            self.in_recovery = True
        elif count > 3 and self.in_recovery:         # each further one: a segment has left
            self.cwnd += self.smss

    def timeout(self, snd_una: int, snd_max: int) -> None:
        """The retransmission timer expired."""
        self.ssthresh = self._half_flight(snd_una, snd_max)
        self.cwnd = self.smss                         # the loss window
        self.recover = snd_max
        self.in_recovery = False
        self.bytes_acked = 0

    def compared(self) -> tuple[int, int, int, bool]:
        """What the engine's state must equal: cwnd, ssthresh, recover, in recovery."""
        return self.cwnd, self.ssthresh, self.recover, self.in_recovery
