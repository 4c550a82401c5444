"""HEART_BEAT, UNREGISTER_CLIENT and GET_CONSUMER_LIST_BY_GROUP."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.broker.topics import retry_topic
from pymq.errors import InvalidRequestError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.filter import Subscription
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body, encode_body, get_str
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.app import BrokerApp
    from pymq.transport.connection import Connection


class ClientHandlers:
    def __init__(self, app: BrokerApp) -> None:
        self.app = app

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
        }

    def heartbeat(self, cmd: Command, conn: Connection) -> Command:
        app = self.app
        body = decode_body(cmd.body, "heartbeat")
        if not isinstance(body, dict) or not isinstance(body.get("clientID"), str):
            raise InvalidRequestError("heartbeat body needs a clientID")
        client_id = body["clientID"]
        if "client_id" not in conn.attrs:
            conn.attrs["client_id"] = client_id
            # A closed connection removes its client at once (no waiting for the 120 s expiry).
            conn.add_close_callback(app.consumers.connection_closed)
        try:
            for p in body.get("producerDataSet") or []:
                app.consumers.register_producer(str(p["groupName"]), client_id, conn)
            for c in body.get("consumerDataSet") or []:
                group = str(c["groupName"])
                sg = app.subscription_groups.get(group)
                model = str(c.get("messageModel", "CLUSTERING"))
                if sg is not None and model == "CLUSTERING" and not app.is_slave:
                    # The retry topic exists before anyone needs its route.
                    app.topics.ensure_system_topic(retry_topic(group), sg.retryQueueNums)
                subs = [Subscription.from_dict(s) for s in c.get("subscriptionDataSet") or []]
                app.consumers.register(
                    group,
                    client_id,
                    conn,
                    consume_type=str(c.get("consumeType", "CONSUME_PASSIVELY")),
                    message_model=model,
                    consume_from_where=str(c.get("consumeFromWhere", "CONSUME_FROM_LAST_OFFSET")),
                    subscriptions=subs,
                    language=str(body.get("language", "PYTHON")),
                    version=int(body.get("version", 0)),
                )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidRequestError(f"bad heartbeat body: {exc}") from exc
        return cmd.response()

    def unregister(self, cmd: Command, conn: Connection) -> Command:
        client_id = get_str(cmd.ext, "clientID")
        group = cmd.ext.get("consumerGroup")
        if group:
            self.app.consumers.unregister(str(group), client_id)
        producer_group = cmd.ext.get("producerGroup")
        if producer_group:
            self.app.consumers.unregister_producer(str(producer_group), client_id)
        return cmd.response()

    def consumer_list(self, cmd: Command, conn: Connection) -> Command:
        group = get_str(cmd.ext, "consumerGroup")
        ids = self.app.consumers.client_ids(group)
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer of group {group} is connected")
        return cmd.response(body=encode_body({"consumerIdList": ids}))
