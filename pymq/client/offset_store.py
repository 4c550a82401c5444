"""Where consumer offsets live: on the broker (clustering) or in a local file (broadcasting)."""

from __future__ import annotations

import asyncio
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from pathlib import Path

from pymq.client import broker_api
from pymq.client.instance import ClientInstance
from pymq.errors import PymqError, QueryNotFoundError
from pymq.logs import get_logger
from pymq.protocol.route import MessageQueue

log = get_logger("client.offsets")

#: offset commits a persist keeps in flight at once
COMMITS_IN_FLIGHT = 64


class OffsetStore(ABC):
    """Offsets are "next offset to consume". ``-1`` means none is known."""

    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}

    async def load(self) -> None:
        return None

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        if increase_only and self.table.get(mq, -1) >= offset:
            return
        self.table[mq] = offset

    def read_memory(self, mq: MessageQueue) -> int:
        return self.table.get(mq, -1)

    @abstractmethod
    async def read(self, mq: MessageQueue) -> int:
        """The committed offset from durable storage (broker or file); -1 if none."""

    def committed_from(self, mq: MessageQueue, broker_offset: int) -> int:
        """Where ``mq`` resumes, given the broker's committed offset for it (-1: none) from a batch query."""
        return self.table.get(mq, -1)

    @property
    def on_broker(self) -> bool:
        """Whether the committed offsets are the broker's (a batch query then reads them)."""
        return False

    @abstractmethod
    async def persist(self, mqs: list[MessageQueue]) -> None:
        """Make the in-memory offsets of ``mqs`` durable."""

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)


class RemoteOffsetStore(OffsetStore):
    """Clustering: offsets committed to the queue's master (UPDATE/QUERY_CONSUMER_OFFSET).

    Offsets are the master's: while a queue's master is gone from the route they stay here
    (a slave is never written) and reach the master when it is back. A queue given up in
    the meantime keeps its last offset in :attr:`pending` until the master takes it (or
    this consumer takes the queue again). Reading an offset with no master asks a slave,
    which holds a copy synchronised from its master (as RocketMQ's consumers do).
    """

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group
        #: the offset of each queue the master last acknowledged
        self._acked: dict[MessageQueue, int] = {}
        #: given-up queues whose last offset has not reached their master yet
        self.pending: dict[MessageQueue, int] = {}

    async def _addr(self, mq: MessageQueue, refreshed: set[str] | None = None) -> str | None:
        addr = self.instance.broker_addr(mq.brokerName)
        if addr is None and (refreshed is None or mq.topic not in refreshed):
            if refreshed is not None:
                refreshed.add(mq.topic)
            await self.instance.update_route(mq.topic)
            addr = self.instance.broker_addr(mq.brokerName)
        return addr

    async def read(self, mq: MessageQueue) -> int:
        addr = await self._addr(mq) or self.instance.broker_addr(mq.brokerName, master_only=False)
        if addr is None:
            raise PymqError(f"no address for broker {mq.brokerName}")
        return self.committed_from(mq, await self._query(addr, mq))

    @property
    def on_broker(self) -> bool:
        return True

    def committed_from(self, mq: MessageQueue, broker_offset: int) -> int:
        offset = broker_offset
        kept = self.pending.pop(mq, None)
        if kept is not None and kept > offset:
            # Our own progress the master has not seen yet: it is still to be committed.
            offset = self.table[mq] = kept
        # Otherwise the in-memory offset is left alone: it may be ahead of what the broker (or a
        # slave's copy) has, and committing a read-back value would move the group backwards.
        return offset

    async def persist(self, mqs: list[MessageQueue]) -> None:
        refreshed: set[str] = set()
        # Up to COMMITS_IN_FLIGHT commits at a time, not one round trip after the other (issue 36).
        commits: list[Awaitable[None]] = []
        for mq in mqs:
            offset = self.table.get(mq)
            if offset is None or offset < 0 or self._acked.get(mq) == offset:
                # Unchanged since the master took it: a consumer of thousands of idle queues
                # would otherwise make thousands of round trips every persist (issue 36). Pulls
                # carry the offset too: a master that lost it gets it back with the next pull.
                continue
            addr = await self._addr(mq, refreshed)
            if addr is None:
                continue  # no master now: kept until it is back
            commits.append(self._commit_one(addr, mq, offset))
            if len(commits) >= COMMITS_IN_FLIGHT:
                await asyncio.gather(*commits)
                commits = []
        await asyncio.gather(*commits)
        for mq, offset in list(self.pending.items()):
            if mq in self.table:
                continue  # taken again: committed from the table
            addr = await self._addr(mq, refreshed)
            if addr is None:
                continue
            # The queue may have a new owner by now, which may have committed further: never
            # move the group's offset back (one query more, for given-up queues only).
            try:
                current = await self._query(addr, mq)
            except PymqError as exc:
                log.warning("offset_query_failed", group=self.group, queue=str(mq), reason=str(exc))
                continue
            if current >= offset or await self._commit(addr, mq, offset):
                if self.pending.get(mq) == offset:
                    del self.pending[mq]
                log.info("pending_offset_settled", group=self.group, queue=str(mq), offset=max(current, offset))

    async def _query(self, addr: str, mq: MessageQueue) -> int:
        cmd = broker_api.query_consumer_offset(self.group, mq.topic, mq.queueId)
        try:
            resp = await self.instance.rpc.invoke_ok(addr, cmd, self.instance.config.rpc_timeout_seconds)
        except QueryNotFoundError:
            return -1
        return int(resp.ext.get("offset", -1))

    async def _commit_one(self, addr: str, mq: MessageQueue, offset: int) -> None:
        if await self._commit(addr, mq, offset):
            self._acked[mq] = offset

    async def _commit(self, addr: str, mq: MessageQueue, offset: int) -> bool:
        cmd = broker_api.update_consumer_offset(self.group, mq.topic, mq.queueId, offset)
        try:
            await self.instance.rpc.invoke_ok(addr, cmd, self.instance.config.rpc_timeout_seconds)
        except PymqError as exc:
            log.warning("offset_commit_failed", group=self.group, queue=str(mq), reason=str(exc))
            return False
        return True

    def unacknowledged(self) -> dict[MessageQueue, int]:
        """Offsets no master has taken yet (owned queues and given-up ones)."""
        out = {mq: off for mq, off in self.table.items() if off >= 0 and self._acked.get(mq) != off}
        out.update((mq, off) for mq, off in self.pending.items() if mq not in self.table)
        return out

    def remove(self, mq: MessageQueue) -> None:
        offset = self.table.pop(mq, None)
        acked = self._acked.pop(mq, None)
        if offset is not None and offset >= 0 and offset != acked:
            self.pending[mq] = offset
            log.info("offset_kept_for_master", group=self.group, queue=str(mq), offset=offset)


def default_offset_dir() -> Path:
    return Path(os.environ.get("PYMQ_OFFSET_DIR", Path.home() / ".pymq_offsets"))


class LocalOffsetStore(OffsetStore):
    """Broadcasting: offsets in ``<dir>/<clientId>/<group>/offsets.json``, written atomically."""

    def __init__(self, directory: Path, client_key: str, group: str) -> None:
        super().__init__()
        self.path = directory / client_key / group / "offsets.json"

    async def load(self) -> None:
        for candidate in (self.path, self.path.with_name("offsets.json.bak")):
            try:
                data = json.loads(candidate.read_text())
            except FileNotFoundError:
                continue
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                log.warning("offset_file_corrupt", path=str(candidate), reason=str(exc))
                continue
            for row in data.get("offsetTable", []):
                self.table[MessageQueue(row["topic"], row["brokerName"], int(row["queueId"]))] = int(row["offset"])
            return

    async def read(self, mq: MessageQueue) -> int:
        return self.table.get(mq, -1)

    async def persist(self, mqs: list[MessageQueue]) -> None:
        # The file holds every queue, so one write covers any subset.
        rows = [{**mq.to_dict(), "offset": off} for mq, off in sorted(self.table.items()) if off >= 0]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name("offsets.json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"offsetTable": rows}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        if self.path.exists():
            os.replace(self.path, self.path.with_name("offsets.json.bak"))
        os.replace(tmp, self.path)
