"""The replicated application: a key-value store with 64-byte keys and values, its operations as
request bytes, and the seeded workload of the Beehive paper's VR evaluation (90 % reads, 10 %
writes, uniform keys, closed-loop clients).

A request (the body a PREPARE's digest covers, :func:`~beehive.apps.vr_witness.request_digest`)
is ``b"G" + key`` (get, 65 bytes) or ``b"P" + key + value`` (put, 129 bytes). A get's result is
the value (``None`` if the key was never written), a put's is ``b"OK"``.
"""

import dataclasses
import random
from collections.abc import Iterator


__all__ = ["KEY_BYTES", "VALUE_BYTES", "KvOp", "KvStore", "reference_results", "workload"]

KEY_BYTES = VALUE_BYTES = 64


@dataclasses.dataclass(frozen=True)
class KvOp:
    """A get (``value is None``) or a put of ``key``."""
    key: bytes
    value: bytes | None = None

    def __post_init__(self) -> None:
        if len(self.key) != KEY_BYTES or (self.value is not None
                                          and len(self.value) != VALUE_BYTES):
            raise ValueError(f"keys and values are {KEY_BYTES} bytes, not {len(self.key)} and "
                             f"{None if self.value is None else len(self.value)}")

    def encode(self) -> bytes:
        return b"G" + self.key if self.value is None else b"P" + self.key + self.value

    @classmethod
    def decode(cls, body: bytes) -> "KvOp":
        if body[:1] == b"G" and len(body) == 1 + KEY_BYTES:
            return cls(body[1:])
        if body[:1] == b"P" and len(body) == 1 + KEY_BYTES + VALUE_BYTES:
            return cls(body[1:1 + KEY_BYTES], body[1 + KEY_BYTES:])
        raise ValueError(f"not a key-value request: {body[:8].hex()}... ({len(body)} bytes)")


class KvStore:
    """The state machine: :meth:`execute` applies a request's bytes, returns its result."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    def execute(self, body: bytes) -> bytes | None:
        op = KvOp.decode(body)
        if op.value is None:
            return self.data.get(op.key)
        self.data[op.key] = op.value
        return b"OK"


def workload(seed: int, ops: int, *, keys: int = 1000,
             read_ratio: float = 0.9) -> Iterator[KvOp]:
    """``ops`` operations, reproducible from ``seed``: each a get with probability
    ``read_ratio``, else a put of 64 random bytes, of a key drawn uniformly from ``keys``."""
    rng = random.Random(seed)
    for _ in range(ops):
        key = f"key-{rng.randrange(keys):08d}".encode().ljust(KEY_BYTES, b".")
        yield KvOp(key) if rng.random() < read_ratio else KvOp(key, rng.randbytes(VALUE_BYTES))


def reference_results(ops: list[KvOp]) -> list[bytes | None]:
    """What a plain dict answers to ``ops`` in order: the results a group must give."""
    data: dict[bytes, bytes] = {}
    out: list[bytes | None] = []
    for op in ops:
        if op.value is None:
            out.append(data.get(op.key))
        else:
            data[op.key] = op.value
            out.append(b"OK")
    return out
