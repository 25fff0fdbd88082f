"""The software witness: the VR witness of :mod:`beehive.apps.vr_witness` in Python.

It is the witness of the all-software group (the CPU witness of the Beehive paper's comparison)
and the golden model the tile is tested against: the same messages in give the same replies
and counters out.
"""

import dataclasses

from beehive.apps.vr_witness import (MalformedMessage, NackReason, VrMessage, VrStatus, VrType,
                                     chain_digest)


__all__ = ["SoftwareWitness", "LogEntry", "COUNTERS"]

#: The tile's counters, in its order.
COUNTERS = ("prepares", "commits", "nacks", "view_changes", "start_views", "queries", "dropped")

_TAKEN = {VrType.PREPARE, VrType.COMMIT, VrType.START_VIEW_CHANGE, VrType.START_VIEW,
          VrType.LOG_QUERY}


@dataclasses.dataclass(frozen=True)
class LogEntry:
    op: int
    client: int
    request: int
    digest: int


class SoftwareWitness:
    """The witness of shard ``shard`` with an op-metadata ring of ``log_depth`` entries.

    :meth:`handle` takes a datagram and returns the reply datagram, or ``None`` (COMMIT, or a
    dropped datagram). The state is public: :attr:`view`, :attr:`normal_view`,
    :attr:`status`, :attr:`op`, :attr:`commit`, :attr:`summary` (the log summary) and
    :attr:`counters`.
    """

    def __init__(self, shard: int = 0, log_depth: int = 256) -> None:
        self.shard = shard
        self.log_depth = log_depth
        self.view = self.normal_view = self.op = self.commit = self.summary = 0
        self.status = VrStatus.NORMAL
        self.ring: dict[int, LogEntry] = {}
        self.counters = dict.fromkeys(COUNTERS, 0)

    def handle(self, payload: bytes) -> bytes | None:
        reply = self.receive(payload)
        return None if reply is None else reply.pack()

    def receive(self, payload: bytes) -> VrMessage | None:
        """:meth:`handle` on decoded messages: the reply as a :class:`VrMessage`."""
        try:
            msg = VrMessage.unpack(payload)
        except MalformedMessage:
            msg = None
        if msg is None or msg.shard != self.shard or msg.type not in _TAKEN:
            self.counters["dropped"] += 1
            return None
        reason, reply_type = self._decide(msg)
        if reason is not NackReason.NONE:
            self.counters["nacks"] += 1
            return self._reply(VrType.NACK, msg, reason=reason, digest=self.summary)
        return None if reply_type is None else self._answer(reply_type, msg)

    def _view_reason(self, msg: VrMessage) -> NackReason:
        if self.status is not VrStatus.NORMAL:
            return NackReason.VIEW_CHANGE
        if msg.view != self.view:
            return NackReason.OLD_VIEW if msg.view < self.view else NackReason.NEW_VIEW
        return NackReason.NONE

    def _decide(self, msg: VrMessage) -> tuple[NackReason, VrType | None]:
        """Apply ``msg`` to the state: ``(NACK reason, reply type)``."""
        if msg.type is VrType.PREPARE:
            reason = self._view_reason(msg)
            if reason is NackReason.NONE and msg.op != self.op + 1:
                reason = NackReason.GAP if msg.op > self.op + 1 else NackReason.STALE_OP
            if reason is not NackReason.NONE:
                return reason, None
            self.op = msg.op
            self.ring[msg.op % self.log_depth] = LogEntry(msg.op, msg.client, msg.request,
                                                          msg.digest)
            self._logged(msg)
            self.summary = chain_digest(self.summary, msg.op, msg.client, msg.request,
                                        msg.digest)
            self._advance_commit(msg.commit)
            self.counters["prepares"] += 1
            return NackReason.NONE, VrType.PREPARE_OK
        if msg.type is VrType.COMMIT:
            reason = self._view_reason(msg)
            if reason is NackReason.NONE:
                self._advance_commit(msg.commit)
                self.counters["commits"] += 1
            return reason, None
        if msg.type is VrType.START_VIEW_CHANGE:
            if msg.view > self.view:
                self.view, self.status = msg.view, VrStatus.VIEW_CHANGE
                self.counters["view_changes"] += 1
            elif not (msg.view == self.view and self.status is VrStatus.VIEW_CHANGE):
                return NackReason.OLD_VIEW, None
            return NackReason.NONE, VrType.DO_VIEW_CHANGE
        if msg.type is VrType.START_VIEW:
            if msg.view < self.view:
                return NackReason.OLD_VIEW, None
            self.view = self.normal_view = msg.view
            self.status = VrStatus.NORMAL
            self.op, self.commit, self.summary = msg.op, min(msg.commit, msg.op), msg.digest
            self._committed()
            self.counters["start_views"] += 1
            return NackReason.NONE, VrType.PREPARE_OK
        # LOG_QUERY
        if self.entry(msg.op) is None:
            return NackReason.NOT_IN_LOG, None
        self.counters["queries"] += 1
        return NackReason.NONE, VrType.LOG_ENTRY

    def _advance_commit(self, commit: int) -> None:
        self.commit = max(self.commit, min(commit, self.op))
        self._committed()

    # Hooks for a member that keeps more than the metadata (:class:`beehive.vr.group.Replica`).
    def _logged(self, msg: VrMessage) -> None:
        """A PREPARE's op was just logged."""

    def _committed(self) -> None:
        """The commit number may have moved on."""

    def entry(self, op: int) -> LogEntry | None:
        """The ring's entry of ``op``, if it is logged and not overwritten."""
        got = self.ring.get(op % self.log_depth)
        return got if 0 < op <= self.op and got is not None and got.op == op else None

    def _answer(self, reply_type: VrType, msg: VrMessage) -> VrMessage:
        if reply_type is VrType.PREPARE_OK:
            digest = msg.digest if msg.type is VrType.PREPARE else self.summary
            return self._reply(reply_type, msg, digest=digest)
        if reply_type is VrType.DO_VIEW_CHANGE:
            last = self.ring.get(self.op % self.log_depth)
            if last is None or last.op != self.op:
                last = LogEntry(self.op, 0, 0, 0)
            return self._reply(reply_type, msg, digest=self.summary, client=last.client,
                               request=last.request)
        got = self.entry(msg.op)
        assert got is not None
        return self._reply(reply_type, msg, op=msg.op, client=got.client, request=got.request,
                           digest=got.digest)

    def _reply(self, reply_type: VrType, msg: VrMessage, *, reason: NackReason = NackReason.NONE,
               **fields: int) -> VrMessage:
        values = dict(view=self.view, normal_view=self.normal_view, op=self.op,
                      commit=self.commit, client=msg.client, request=msg.request)
        values.update(fields)
        return VrMessage(reply_type, shard=self.shard, status=self.status, reason=reason,
                         **values)
