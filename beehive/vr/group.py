"""A Viewstamped Replication group of three: a leader, a software replica and a witness (the
Beehive paper's Fig. 10), serving the key-value store of :mod:`beehive.vr.kv`.

Every client operation, read or write, is ordered and validated through the group (the paper's
witness "validates the leader and tracks the operation order"): the leader gives it the next op
number, sends PREPARE to the replica (with the request's bytes) and to the witness (its
metadata only), and once one of them has answered PREPARE_OK it has a quorum of 2 of 3 (itself
and that one): it commits the op, executes it on its store and answers the client. The commit
number reaches the others on the next PREPARE, or on a COMMIT (:meth:`Group.heartbeat`). Reads
are served by the leader.

Failures:

* The witness dies (or is quarantined by Apiary): the replica's PREPARE_OK is the quorum;
  requests keep completing. The leader keeps sending it PREPAREs; if it comes back behind, its
  NACK (GAP) makes the leader resend what it missed, from its own log.
* The replica dies: the witness's PREPARE_OK is the quorum.
* The leader dies (:meth:`Group.fail_leader`): the replica starts view ``v + 1`` with
  START_VIEW_CHANGE to the witness, takes its DO_VIEW_CHANGE (the witness's op number, commit
  number and log summary), and, the two of them a quorum, becomes leader with START_VIEW. A
  witness holds metadata only, so the new leader can take over only ops whose bytes it holds:
  if the witness committed ops the replica never received (possible only if the replica had
  been failing, a second failure) :class:`LostOps` says so.

The clients are closed loop (one request outstanding each); the leader's client table answers
a retransmitted request from its cache, as VR's does.
"""

import dataclasses
from collections.abc import Iterable, Iterator

from beehive.apps.vr_witness import (NackReason, VrMessage, VrType, chain_digest,
                                     request_digest)

from .kv import KvOp, KvStore
from .links import WitnessLink
from .witness import SoftwareWitness


__all__ = ["Group", "Replica", "StateMachine", "NoQuorum", "Deposed", "LostOps", "run_workload"]


class NoQuorum(RuntimeError):
    """Neither the replica nor the witness answered: the op cannot commit."""


class Deposed(RuntimeError):
    """The leader learnt of a newer view: it is not the leader any more."""


class LostOps(RuntimeError):
    """A view change found committed ops whose bytes no live member holds."""


@dataclasses.dataclass(frozen=True)
class Record:
    """One op of a data-holding member's log."""
    op: int
    client: int
    request: int
    digest: int
    body: bytes


class StateMachine:
    """The store plus VR's client table (each client's last request number and result)."""

    def __init__(self) -> None:
        self.store = KvStore()
        self.clients: dict[int, tuple[int, bytes | None]] = {}

    def apply(self, record: Record) -> bytes | None:
        result = self.store.execute(record.body)
        self.clients[record.client] = (record.request, result)
        return result


class Replica(SoftwareWitness):
    """The software replica: the witness's rules (it is a :class:`SoftwareWitness`), plus every
    op's bytes, executed in order as they commit."""

    def __init__(self, shard: int = 0) -> None:
        super().__init__(shard, log_depth=1 << 62)
        self.log: dict[int, Record] = {}
        self.machine = StateMachine()
        self.executed = 0
        self.alive = True
        self._body = b""

    def prepare(self, payload: bytes, body: bytes) -> bytes | None:
        """A PREPARE with the request's bytes (anything else as :meth:`handle`)."""
        if not self.alive:
            return None
        self._body = body
        return self.handle(payload)

    def _logged(self, msg: VrMessage) -> None:
        if request_digest(self._body) != msg.digest:
            raise ValueError(f"op {msg.op}: the request's bytes do not match its digest")
        self.log[msg.op] = Record(msg.op, msg.client, msg.request, msg.digest, self._body)

    def _committed(self) -> None:
        while self.executed < self.commit and self.executed + 1 in self.log:
            self.executed += 1
            self.machine.apply(self.log[self.executed])


class Group:
    """Leader + replica + witness of shard ``shard``; ``witness`` is any
    :class:`~beehive.vr.links.WitnessLink` (a software witness, the FPGA's over UDP, a
    simulated tile).

    :meth:`submit` runs one client request to completion and returns its result.
    """

    def __init__(self, witness: WitnessLink, *, shard: int = 0) -> None:
        self.shard = shard
        self.witness = witness
        self.replica: Replica | None = Replica(shard)
        self.view = self.op = self.commit = self.summary = 0
        self.log: dict[int, Record] = {}
        self.machine = StateMachine()
        self.leader_alive = True
        self.stats = {"witness_acks": 0, "replica_acks": 0, "witness_misses": 0,
                      "resent": 0, "view_changes": 0}

    # -- the leader's normal case --------------------------------------------------------------

    def _message(self, kind: VrType, *, op: int = 0, commit: int = 0, client: int = 0,
                 request: int = 0, digest: int = 0) -> VrMessage:
        return VrMessage(kind, shard=self.shard, view=self.view, op=op, commit=commit,
                         client=client, request=request, digest=digest)

    def _prepare(self, record: Record) -> VrMessage:
        return self._message(VrType.PREPARE, op=record.op, commit=self.commit,
                             client=record.client, request=record.request, digest=record.digest)

    def submit(self, client: int, request: int, op: KvOp) -> bytes | None:
        """Run ``client``'s request number ``request`` and return its result.

        Raises
        ------
        NoQuorum
            Neither the replica nor the witness acknowledged it (then it is not executed).
        Deposed
            The witness is in a newer view.
        """
        last = self.machine.clients.get(client)
        if last is not None and last[0] == request:
            return last[1]                      # a retransmission: the cached result
        body = op.encode()
        self.op += 1
        record = Record(self.op, client, request, request_digest(body), body)
        self.log[record.op] = record
        self.summary = chain_digest(self.summary, record.op, client, request, record.digest)
        prepare = self._prepare(record)
        acks = 0
        if self.replica is not None and self._ok(self.replica.prepare(prepare.pack(), body),
                                                 record.op):
            acks += 1
            self.stats["replica_acks"] += 1
        if self._witness_prepare(prepare):
            acks += 1
            self.stats["witness_acks"] += 1
        else:
            self.stats["witness_misses"] += 1
        if not acks:
            del self.log[record.op]             # never prepared anywhere else: forget it
            self.op -= 1
            raise NoQuorum(f"op {record.op}: no PREPARE_OK from the replica or the witness")
        self.commit = record.op
        return self.machine.apply(record)

    def _ok(self, reply: bytes | None, op: int) -> bool:
        if reply is None:
            return False
        msg = VrMessage.unpack(reply)
        if msg.view > self.view:
            raise Deposed(f"view {self.view}: a member is in view {msg.view}")
        return msg.view == self.view and (
            (msg.type is VrType.PREPARE_OK and msg.op >= op)
            or (msg.type is VrType.NACK and msg.reason is NackReason.STALE_OP and msg.op >= op))

    def _witness_prepare(self, prepare: VrMessage) -> bool:
        reply = self.witness.request(prepare.pack())
        if reply is None:
            return False
        msg = VrMessage.unpack(reply)
        if msg.type is VrType.NACK and msg.reason is NackReason.GAP and msg.view == self.view:
            # The witness missed ops (lost datagrams, a restart): resend them in order.
            for op in range(msg.op + 1, prepare.op + 1):
                self.stats["resent"] += 1
                reply = self.witness.request(self._prepare(self.log[op]).pack())
                if reply is None:
                    return False
        elif msg.type is VrType.NACK and msg.reason is NackReason.NEW_VIEW:
            # The witness missed the START_VIEW of this view: send it again.
            reply = self.witness.request(self._start_view().pack())
        return self._ok(reply, prepare.op)

    def _start_view(self) -> VrMessage:
        return self._message(VrType.START_VIEW, op=self.op, commit=self.commit,
                             digest=self.summary)

    def heartbeat(self) -> None:
        """COMMIT to the replica and the witness: they learn the commit number now, not with
        the next PREPARE."""
        commit = self._message(VrType.COMMIT, commit=self.commit).pack()
        if self.replica is not None:
            self.replica.prepare(commit, b"")
        self.witness.send(commit)

    # -- failures --------------------------------------------------------------------------------

    def fail_replica(self) -> None:
        assert self.replica is not None
        self.replica.alive = False

    def fail_leader(self) -> None:
        """The leader dies; the replica takes over in view ``v + 1`` with the witness.

        Raises
        ------
        NoQuorum
            The witness does not answer (the replica alone is no quorum), or there is no live
            replica.
        LostOps
            The witness committed ops the replica does not hold.
        """
        replica = self.replica
        if replica is None or not replica.alive:
            raise NoQuorum("no live replica to take over")
        new_view = max(self.view, replica.view) + 1
        svc = VrMessage(VrType.START_VIEW_CHANGE, shard=self.shard, view=new_view)
        replica.handle(svc.pack())              # the replica's own view change
        reply = self.witness.request(svc.pack())
        if reply is None:
            raise NoQuorum(f"view {new_view}: the witness does not answer START_VIEW_CHANGE")
        dvc = VrMessage.unpack(reply)
        if dvc.type is not VrType.DO_VIEW_CHANGE or dvc.view != new_view:
            raise NoQuorum(f"view {new_view}: the witness answered {dvc}")
        held = max(replica.log, default=0)
        if dvc.commit > held:
            raise LostOps(f"view {new_view}: the witness has ops up to {dvc.commit} committed, "
                          f"the replica's bytes end at op {held}")
        # The replica's log is the new view's (VR: the log of the highest normal view; the
        # witness holds no bytes, so ops only it logged are dropped as uncommitted).
        self.view, self.op, self.log = new_view, held, dict(replica.log)
        self.commit = held
        self.summary = 0
        for op in range(1, held + 1):
            r = self.log[op]
            self.summary = chain_digest(self.summary, op, r.client, r.request, r.digest)
        replica.handle(self._start_view().pack())
        self.machine = replica.machine          # executes the rest of its log now
        self.replica = None                     # the old leader is gone: two members left
        if not self._ok(self.witness.request(self._start_view().pack()), held):
            raise NoQuorum(f"view {new_view}: the witness did not take START_VIEW")
        self.stats["view_changes"] += 1


def run_workload(group: Group, ops: Iterable[KvOp], *, clients: int = 4,
                 heartbeat_every: int = 16) -> Iterator[bytes | None]:
    """Closed-loop clients ``0 .. clients - 1`` taking the ops in turn, one request
    outstanding each; yields every result in order. A COMMIT heartbeat every
    ``heartbeat_every`` ops and at the end."""
    requests = [0] * clients
    count = 0
    for count, op in enumerate(ops, 1):
        client = count % clients
        requests[client] += 1
        yield group.submit(client, requests[client], op)
        if count % heartbeat_every == 0:
            group.heartbeat()
    if count % heartbeat_every:
        group.heartbeat()
