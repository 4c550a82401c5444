"""What push and pull consumers share: subscriptions, rebalance, one pull task per owned queue.

Rebalance (every 20 s, and at once when the broker says the group changed) lists the
topic's readable queues and the group's members, sorted, and keeps the queues the
allocation strategy gives this client. A queue taken away stops pulling, has its offset
committed and its cache dropped; a queue gained starts from the group's committed offset,
or from ``consume_from_where`` if the group has none.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import abstractmethod
from pathlib import Path
from typing import Any

from pymq.client import broker_api
from pymq.client.allocate import AllocateAveragely, AllocateStrategy
from pymq.client.arrivals import ArrivalWaiter
from pymq.client.consumer_types import ConsumeFromWhere, MessageModel, PullStatus
from pymq.client.instance import ClientInstance
from pymq.client.offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore, default_offset_dir
from pymq.client.process_queue import ProcessQueue
from pymq.client.pull_api import PullNodes, PullResult, decode_pulled, pull
from pymq.client.rebalance import QueueOwnership, assign
from pymq.client.running_info import running_info
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.errors import ClientError, ClosedError, PymqError, RemoteError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.filter import Subscription, parse_tags_strict
from pymq.protocol.message import MessageExt
from pymq.protocol.requests import I32_MAX, MAX_PULL_MSG_NUMS, MAX_QUEUES_PER_REQUEST, RETRY_PREFIX
from pymq.protocol.route import MessageQueue

log = get_logger("client.consumer")

#: how long the broker may hold a pull that finds nothing (long polling)
BROKER_SUSPEND_MS = 15_000
#: client-side timeout of a long-polling pull
PULL_TIMEOUT = 30.0
PULL_DELAY_FLOW_CONTROL = 0.05
PULL_DELAY_ERROR = 3.0
#: bytes of records a pull asks for (RocketMQ 5's pullBatchSizeInBytes default): a pull is
#: sized by bytes, so small messages come hundreds to a request
DEFAULT_PULL_BATCH_BYTES = 256 * 1024


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


class ConsumerBase:
    consume_type = "CONSUME_PASSIVELY"
    #: keep one pull per queue in flight ahead of the batch being handed over (push consumers)
    pulls_ahead = False
    #: clustering push consumers also consume their group's retry topic
    uses_retry_topic = True
    #: idle queues wait for messages through one ArrivalWaiter (issue 36), not a long poll each
    wait_for_arrivals = True
    #: ... once the consumer owns this many queues: below it each idle queue long-polls (one round
    #: trip from a message's arrival to its delivery; the waiter's answer-then-pull takes two)
    arrival_wait_min_queues = 64

    def __init__(
        self,
        namesrv: str | list[str],
        group: str,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        consume_timestamp: int | None = None,
        allocate_strategy: AllocateStrategy | None = None,
        pull_batch_size: int | None = None,
        pull_batch_bytes: int = DEFAULT_PULL_BATCH_BYTES,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100 * 1024 * 1024,
        offset_store_dir: str | Path | None = None,
        clock: Clock = SYSTEM_CLOCK,
        **client_options: Any,
    ) -> None:
        if not group:
            raise ClientError("consumer group must not be empty")
        if pull_batch_size is not None and not 1 <= pull_batch_size <= MAX_PULL_MSG_NUMS:
            # As RocketMQ's checkConfig: the broker would refuse every pull (INVALID_PARAMETER).
            raise ClientError(f"pull_batch_size must be between 1 and {MAX_PULL_MSG_NUMS}, got {pull_batch_size}")
        if not 1 <= pull_batch_bytes <= I32_MAX:
            raise ClientError(f"pull_batch_bytes must be between 1 and {I32_MAX}, got {pull_batch_bytes}")
        self.namesrv = namesrv
        self.group = group
        self.message_model = MessageModel(message_model)
        self.consume_from_where = ConsumeFromWhere(consume_from_where)
        self.consume_timestamp = consume_timestamp
        self.allocate_strategy = allocate_strategy or AllocateAveragely()
        #: a pull returns at most ``pull_batch_bytes`` of records (at least one) and, when set,
        #: at most ``pull_batch_size`` messages (else up to MAX_PULL_MSG_NUMS)
        self.pull_batch_size = pull_batch_size
        self.pull_batch_bytes = pull_batch_bytes
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.offset_store_dir = Path(offset_store_dir) if offset_store_dir else default_offset_dir()
        self._client_options = client_options
        #: times of rebalance, pulls and process queues (a FakeClock in tests)
        self.clock = clock
        self.subscriptions: dict[str, Subscription] = {}
        self.instance: ClientInstance | None = None
        self.offset_store: OffsetStore | None = None
        #: which broker of each queue's group to pull from (the master, or a slave it suggests)
        self.pull_nodes = PullNodes()
        #: the owned queues: a process queue and a pull task each (see pymq.client.rebalance)
        self.ownership = QueueOwnership(
            group, clock, start_offsets=self._start_offsets, commit=self._commit_released, pull=self._pull_loop
        )
        #: where idle queues wait for messages (set at start; None: each idle queue long-polls)
        self.arrivals: ArrivalWaiter | None = None
        self._rebalance_lock = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()
        self._started = False
        self._closing = False
        #: when start() ran (epoch ms; 0: not started), for running info
        self.start_timestamp = 0

    # --- subscriptions ------------------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic`` messages whose tag matches ``expression`` (``*`` or ``TagA || TagB``).

        Raises ClientError for an expression the broker would take as one tag matching nothing
        (``"a,b"``, ``"created paid"``, ``"a ||"``), as ``pymq-admin consume --tags`` does.
        """
        if self._started:
            raise ClientError("subscribe before start()")
        try:
            parse_tags_strict(expression)
        except ValueError as exc:
            raise ClientError(str(exc)) from None
        self.subscriptions[topic] = Subscription.parse(topic, expression, self.clock.time_ms())

    # --- lifecycle ------------------------------------------------------------------------------------------

    async def start(self) -> Any:
        if self._started:
            return self
        if not self.subscriptions:
            raise ClientError("subscribe to at least one topic before start()")
        inst = ClientInstance.acquire(self.namesrv, clock=self.clock, **self._client_options)
        if self.group in inst.consumers:
            await inst.release()
            raise ClientError(f"consumer group {self.group} is already started in client {inst.client_id}")
        self.instance = inst
        if self.wait_for_arrivals:
            self.arrivals = ArrivalWaiter(
                inst, self.group, suspend_ms=BROKER_SUSPEND_MS, timeout=PULL_TIMEOUT, locate=self._pull_addr
            )
        self.pull_nodes.follow = inst.config.follow_pull_suggestion
        if self.message_model is MessageModel.CLUSTERING:
            if self.uses_retry_topic:
                # Failed messages come back through the group's retry topic: subscribe to it too.
                rt = retry_topic(self.group)
                self.subscriptions.setdefault(rt, Subscription.parse(rt, "*"))
            self.offset_store = RemoteOffsetStore(inst, self.group)
        else:
            ip = inst.client_id.split("@", 1)[0]
            instance_name = self._client_options.get("instance_name") or "DEFAULT"
            self.offset_store = LocalOffsetStore(self.offset_store_dir, f"{ip}@{instance_name}", self.group)
        await self.offset_store.load()
        inst.consumers[self.group] = self
        await inst.start()
        self._started = True
        self.start_timestamp = self.clock.time_ms()
        await self._on_start()
        for topic in list(self.subscriptions):
            try:
                await inst.update_route(topic)
            except PymqError as exc:
                log.warning("route_fetch_failed", topic=topic, reason=str(exc))
        await inst.send_heartbeat_to_all()
        await self.rebalance()
        inst.trigger_rebalance()
        return self

    async def _on_start(self) -> None:
        return None

    async def close(self) -> None:
        """Stop pulling, let in-flight consumption finish, commit offsets, leave the group."""
        if not self._started or self._closing:
            return
        self._closing = self.ownership.closing = True
        inst = self.instance
        assert inst is not None
        # A rebalance already under way may still take queues: let it finish (later ones see
        # _closing and do nothing), so that no pull task starts after these are stopped.
        async with self._rebalance_lock:
            await self.ownership.stop_all()
        if self.arrivals is not None:
            self.arrivals.close()
        # Consumption in flight finishes and moves the offsets before they are committed.
        await self._on_close()
        for pq in self.process_queues.values():
            pq.dropped = True
        await self.persist_offsets()
        if isinstance(self.offset_store, RemoteOffsetStore):
            lost = self.offset_store.unacknowledged()
            if lost:
                # Their masters are away: the group will consume these queues again from older offsets.
                log.warning(
                    "offsets_not_committed",
                    group=self.group,
                    offsets={str(mq): off for mq, off in sorted(lost.items())},
                )
        inst.consumers.pop(self.group, None)
        await inst.unregister(consumer_group=self.group)
        await inst.release()

    async def _on_close(self) -> None:
        return None

    async def __aenter__(self) -> Any:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _instance(self) -> ClientInstance:
        if self._closing:
            raise ClosedError("consumer is closed")
        if self.instance is None:
            raise ClientError("consumer is not started")
        return self.instance

    # --- ClientMember ---------------------------------------------------------------------------------------

    def heartbeat_data(self) -> dict[str, Any]:
        return {
            "groupName": self.group,
            "consumeType": self.consume_type,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "subscriptionDataSet": [s.to_dict() for s in self.subscriptions.values()],
        }

    def topics_of_interest(self) -> list[str]:
        return list(self.subscriptions)

    def running_info(self, client_id: str, *, jstack: bool = False) -> dict[str, Any]:
        """This consumer's GET_CONSUMER_RUNNING_INFO answer (see :mod:`pymq.client.running_info`)."""
        return running_info(self, client_id, jstack=jstack)

    async def masters_moved(self, brokers: set[str]) -> None:
        """New masters (issue 32): pulls and commits follow the route; push consumers tell their service."""
        return None

    # --- rebalance ---------------------------------------------------------------------------------------

    async def rebalance(self) -> None:
        if not self._started or self._closing:
            return
        async with self._rebalance_lock:
            await self._do_rebalance()

    async def _do_rebalance(self) -> None:
        inst = self._instance()
        for topic in list(self.subscriptions):
            queues = await inst.routes.read_queues(topic)
            members = (
                [] if self.message_model is MessageModel.BROADCASTING else await inst.consumer_ids(self.group, topic)
            )
            mine = assign(self.message_model, self.allocate_strategy, self.group, inst.client_id, queues, members)
            if mine is not None:
                await self.ownership.update(topic, mine)

    async def _commit_released(self, mq: MessageQueue) -> None:
        """A queue was given up: commit its offset and forget it."""
        store = self.offset_store
        assert store is not None
        with contextlib.suppress(PymqError):
            await store.persist([mq])
        store.remove(mq)
        self.pull_nodes.table.pop(mq, None)

    async def _start_offsets(self, mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        """Where each taken queue starts (left out: not taken now): one QUERY_QUEUE_OFFSETS per
        broker for all of them, not a round trip or two per queue (issue 36)."""
        inst = self._instance()
        by_addr: dict[str, list[MessageQueue]] = {}
        out: dict[MessageQueue, int] = {}
        one_by_one: list[MessageQueue] = []
        for mq in mqs:
            addr = inst.broker_addr(mq.brokerName) or inst.broker_addr(mq.brokerName, master_only=False)
            if addr is None:
                one_by_one.append(mq)  # the per-queue path refreshes the route
            else:
                by_addr.setdefault(addr, []).append(mq)
        ts = None
        if self.consume_from_where is ConsumeFromWhere.TIMESTAMP:
            ts = self.consume_timestamp if self.consume_timestamp is not None else self.clock.time_ms() - 1800_000
        for addr, queues in by_addr.items():
            for i in range(0, len(queues), MAX_QUEUES_PER_REQUEST):
                chunk = queues[i : i + MAX_QUEUES_PER_REQUEST]
                cmd = broker_api.query_queue_offsets(self.group, chunk, ts)
                try:
                    resp = await inst.rpc.invoke_ok(addr, cmd, inst.config.rpc_timeout_seconds)
                    rows = broker_api.read_queue_offsets(resp, len(chunk))
                except RemoteError as exc:
                    if exc.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                        one_by_one += chunk  # a broker without the batch query
                    else:
                        log.warning("start_offsets_failed", group=self.group, broker=addr, reason=str(exc))
                    continue
                except PymqError as exc:
                    log.warning("start_offsets_failed", group=self.group, broker=addr, reason=str(exc))
                    continue
                for mq, row in zip(chunk, rows, strict=True):
                    out[mq] = self._start_from(mq, *row)
        for mq in one_by_one:
            out[mq] = await self._start_offset(mq)
        return out

    def _start_from(self, mq: MessageQueue, committed: int, min_offset: int, max_offset: int, by_time: int) -> int:
        """Where ``mq`` starts, from a batch query's offsets (as :meth:`_start_offset` decides)."""
        store = self.offset_store
        assert store is not None
        last = store.committed_from(mq, committed if store.on_broker else -1)
        if last >= 0:
            return last
        if mq.topic.startswith(RETRY_PREFIX):
            return 0
        if self.consume_from_where is ConsumeFromWhere.FIRST_OFFSET:
            return min_offset
        if self.consume_from_where is ConsumeFromWhere.TIMESTAMP:
            return by_time
        return max_offset

    async def _start_offset(self, mq: MessageQueue) -> int:
        store = self.offset_store
        assert store is not None
        try:
            last = await store.read(mq)
            if last >= 0:
                return last
            if mq.topic.startswith(RETRY_PREFIX):
                return 0
            if self.consume_from_where is ConsumeFromWhere.FIRST_OFFSET:
                return await self._queue_offset(RequestCode.GET_MIN_OFFSET, mq)
            if self.consume_from_where is ConsumeFromWhere.TIMESTAMP:
                ts = self.consume_timestamp if self.consume_timestamp is not None else self.clock.time_ms() - 1800_000
                return await self._queue_offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, ts)
            return await self._queue_offset(RequestCode.GET_MAX_OFFSET, mq)
        except PymqError as exc:
            log.warning("start_offset_failed", group=self.group, queue=str(mq), reason=str(exc))
            return -1

    async def _queue_offset(self, code: int, mq: MessageQueue, timestamp: int | None = None) -> int:
        inst = self._instance()
        addr = inst.broker_addr(mq.brokerName, master_only=False)
        if addr is None:
            raise PymqError(f"no address for broker {mq.brokerName}")
        cmd = broker_api.queue_offset(code, mq.topic, mq.queueId, timestamp)
        resp = await inst.rpc.invoke_ok(addr, cmd, inst.config.rpc_timeout_seconds)
        return int(resp.ext.get("offset", 0))

    # --- pulling ---------------------------------------------------------------------------------------------

    def _arrivals_for_many_queues(self) -> ArrivalWaiter | None:
        """The arrival waiter while this consumer owns at least ``arrival_wait_min_queues`` queues."""
        if self.arrivals is not None and len(self.process_queues) >= self.arrival_wait_min_queues:
            return self.arrivals
        return None

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        # With ``pulls_ahead`` the next pull is sent as soon as an answer with records is in, before
        # they are decoded (when the queue's flow control allows it, counting what is already in
        # the process queue: one answer more may arrive past a threshold): the broker reads the
        # next batch while this one is decoded and handed over.
        inst = self._instance()
        ahead: asyncio.Future[PullResult] | None = None
        # With the arrival waiter (a consumer of many queues) an empty pull is answered at once and
        # the queue waits there (one held request for many queues); a pull long-polls only when
        # that wait failed. A consumer of a few queues long-polls each (the lower latency).
        arrivals = self._arrivals_for_many_queues()
        long_poll = arrivals is None
        try:
            while not pq.dropped:
                if ahead is not None:
                    pending, ahead = ahead, None
                    try:
                        result = await pending
                    except asyncio.CancelledError:
                        raise
                    except PymqError as exc:
                        if pq.dropped:
                            return
                        await self._pull_failed(mq, exc)
                        continue
                else:
                    delay = self._flow_control_delay(mq, pq)
                    if delay:
                        await asyncio.sleep(delay)
                        continue
                    if mq.topic not in self.subscriptions:
                        return
                    try:
                        result = await self._pull_once(inst, mq, offset, long_poll)
                    except asyncio.CancelledError:
                        raise
                    except PymqError as exc:
                        if pq.dropped:
                            return
                        await self._pull_failed(mq, exc)
                        continue
                if pq.dropped:
                    return
                pq.last_pull_time = self.clock.monotonic()
                if result.body is not None:
                    # Pulled ahead-style (undecoded): send the next pull first, then decode this one.
                    if not self._flow_control_delay(mq, pq) and mq.topic in self.subscriptions:
                        ahead = asyncio.ensure_future(
                            self._pull_once(inst, mq, result.next_begin_offset, arrivals is None)
                        )
                        await asyncio.sleep(0)  # let it write its request before this answer is decoded
                    if pq.dropped:
                        return
                    try:
                        result.messages = decode_pulled(result.body, mq, self.subscriptions[mq.topic])
                    except PymqError as exc:  # a record that does not decode: retry this offset later
                        if ahead is not None:
                            ahead.cancel()
                            ahead = None
                        await self._pull_failed(mq, exc)
                        continue
                    result.body = None
                offset = await self._handle_pull(mq, pq, offset, result)
                arrivals = self._arrivals_for_many_queues()
                long_poll = arrivals is None
                if arrivals is not None and result.status is PullStatus.NO_NEW_MSG and not pq.dropped:
                    long_poll = not await arrivals.wait(result.addr, mq, offset)
        finally:
            if ahead is not None:
                ahead.cancel()
                if ahead.done() and not ahead.cancelled():
                    ahead.exception()  # retrieved: the queue is gone, the answer is not needed

    def _pull_addr(self, mq: MessageQueue) -> str | None:
        """The broker ``mq`` is pulled from now (None: none known)."""
        inst = self.instance
        target = inst.routes.pull_addr(mq.brokerName, self.pull_nodes.broker_id(mq)) if inst is not None else None
        return target[0] if target is not None else None

    async def _pull_failed(self, mq: MessageQueue, exc: PymqError) -> None:
        log.info("pull_failed", group=self.group, queue=str(mq), reason=str(exc))
        inst = self.instance
        if inst is not None and inst.running and inst.note_failure(exc):
            # a broker gone or not the master: pull again once the routes are fetched (issue 32), at
            # most the usual delay later (the refreshes are paced, so are these pulls)
            await inst.refreshed(PULL_DELAY_ERROR)
            return
        await asyncio.sleep(PULL_DELAY_ERROR)

    async def _pull_once(
        self, inst: ClientInstance, mq: MessageQueue, offset: int, long_poll: bool = True
    ) -> PullResult:
        """One pull of ``mq`` from ``offset`` (held by the broker when ``long_poll``), committing the
        queue's consumed offset with it."""
        store = self.offset_store
        assert store is not None
        commit = store.read_memory(mq) if self.message_model is MessageModel.CLUSTERING else -1
        return await pull(
            inst,
            mq,
            self.group,
            offset,
            self.subscriptions[mq.topic],
            max_nums=self.pull_batch_size or MAX_PULL_MSG_NUMS,
            max_bytes=self.pull_batch_bytes,
            commit_offset=commit,
            suspend_ms=BROKER_SUSPEND_MS if long_poll else 0,
            timeout=PULL_TIMEOUT if long_poll else inst.config.rpc_timeout_seconds,
            nodes=self.pull_nodes,
            decode=not self.pulls_ahead,
        )

    def _flow_control_delay(self, mq: MessageQueue, pq: ProcessQueue) -> float:
        if pq.count > self.pull_threshold_for_queue or pq.size > self.pull_threshold_size_for_queue:
            return PULL_DELAY_FLOW_CONTROL
        return 0.0

    async def _handle_pull(self, mq: MessageQueue, pq: ProcessQueue, offset: int, result: PullResult) -> int:
        store = self.offset_store
        assert store is not None
        nxt = result.next_begin_offset
        if result.status is PullStatus.FOUND:
            if result.messages:
                pq.add(result.messages)
                await self._deliver(mq, pq, result.messages)
            elif pq.count == 0:
                # Every message of the range was filtered out client-side: it is done.
                self._advance(mq, nxt)
                pq.max_offset = max(pq.max_offset, nxt - 1)
            return nxt
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("pull_offset_illegal", group=self.group, queue=str(mq), offset=offset, next=nxt)
            store.update(mq, nxt)
            with contextlib.suppress(PymqError):
                await store.persist([mq])
            pq.max_offset = nxt - 1
            return nxt
        # NO_NEW_MSG / NO_MATCHED_MSG: move on; with nothing in flight the skipped range is done.
        if pq.count == 0 and nxt > offset:
            self._advance(mq, nxt)
            pq.max_offset = max(pq.max_offset, nxt - 1)
        return nxt

    def _advance(self, mq: MessageQueue, offset: int) -> None:
        """Everything below ``offset`` is consumed (or skipped by the filter)."""
        assert self.offset_store is not None
        self.offset_store.update(mq, offset, increase_only=True)

    @abstractmethod
    async def _deliver(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Hand pulled messages to the consumption side (listener or poll buffer)."""

    # --- offsets ---------------------------------------------------------------------------------------------

    async def persist_offsets(self) -> None:
        store = self.offset_store
        if store is None:
            return
        await store.persist(list(self.process_queues))

    def reset_offsets(self, table: dict[MessageQueue, int]) -> None:
        """The broker reset the group's offsets: restart the affected queues from them."""
        task = asyncio.ensure_future(self._reset(table))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _reset(self, table: dict[MessageQueue, int]) -> None:
        store = self.offset_store
        assert store is not None
        for mq, offset in table.items():
            if mq not in self.process_queues:
                continue
            # Not a release: that would commit the old offset over the reset one.
            await self.ownership.restart(mq, offset)
            store.update(mq, offset)  # before the new pull task first runs
            log.info("offset_reset", group=self.group, queue=str(mq), offset=offset)

    @property
    def process_queues(self) -> dict[MessageQueue, ProcessQueue]:
        """The owned queues and their in-flight messages."""
        return self.ownership.process_queues

    def assigned_queues(self) -> list[MessageQueue]:
        return sorted(self.process_queues)
