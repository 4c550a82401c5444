"""Request and response codes. Numbering follows Apache RocketMQ where RocketMQ has the same request."""

from __future__ import annotations

from enum import IntEnum


class RequestCode(IntEnum):
    # produce
    SEND_MESSAGE = 10
    SEND_BATCH_MESSAGE = 320
    # consume
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    GET_CONSUMER_LIST_BY_GROUP = 38
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    GET_BROKER_RUNTIME_INFO = 28
    GET_CONSUMER_CONNECTION_LIST = 203
    # admin -> broker, then broker -> that consumer client (a request, not oneway): the client's running
    # info (subscriptions, per-queue process state, optionally its stacks); RocketMQ's code and header
    GET_CONSUMER_RUNNING_INFO = 307
    # admin -> broker -> one consumer client (or any of its group's): consume this stored message with
    # the listener now, offsets untouched, and say how it went (RocketMQ's code; the dashboard's "resend")
    CONSUME_MESSAGE_DIRECTLY = 309
    # every producer group's connected clients (RocketMQ's GET_ALL_PRODUCER_INFO; the dashboard, issue 33)
    GET_ALL_PRODUCER_INFO = 328
    # the ACL accounts and their rights, never their secret keys (RocketMQ 4's GET_BROKER_CLUSTER_ACL_CONFIG
    # code; its answer there carries the secrets, pymq's does not)
    GET_ACL_ACCOUNTS = 54
    # create or update / delete one ACL account in the broker's ACL file (RocketMQ 4's codes; a msgpack body)
    UPDATE_AND_CREATE_ACL_CONFIG = 50
    DELETE_ACL_CONFIG = 51
    GET_CONSUME_STATS = 208
    RESET_CONSUMER_OFFSET = 222
    # broker -> client push after an offset reset (RocketMQ: RESET_CONSUMER_CLIENT_OFFSET)
    RESET_CONSUMER_CLIENT_OFFSET = 220
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    DELETE_SUBSCRIPTIONGROUP = 207
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_TOPIC_STATS_INFO = 202
    DELETE_TOPIC_IN_BROKER = 215
    # nameserver
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_NAMESRV = 216
    # timer messages (issue 17): pending timers per topic (RocketMQ's TimerMetrics)
    GET_TIMER_METRICS = 61
    # failover (issue 16): a slave copies its master's timer delivery state (RocketMQ's code)
    GET_TIMER_CHECK_POINT = 60
    # replication (master/slave metadata sync and commitlog streaming)
    HA_PULL_COMMITLOG = 900
    # role change (admin -> broker): RocketMQ 5's controller notifies brokers with this code
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    # failover controller (issue 32; pymq's own: RocketMQ's controller speaks another protocol):
    # a broker's heartbeat with its role, epoch and max offset (a master adds its sync-state set),
    # answered with its assignment; the controller's state, and an operator's election, for pymq-admin
    CONTROLLER_HEARTBEAT = 1010
    CONTROLLER_STATUS = 1011
    CONTROLLER_ELECT_MASTER = 1012
    # liveness check, used by benchmarks and health probes
    PING = 999
    # transactional messages (RocketMQ's codes): END_TRANSACTION is oneway producer -> broker,
    # CHECK_TRANSACTION_STATE oneway broker -> producer over the producer's own connection
    END_TRANSACTION = 37
    CHECK_TRANSACTION_STATE = 39
    # pymq admin (RocketMQ has no such request): a broker's pending half messages
    GET_PENDING_HALF_MESSAGES = 980
    # pymq (issue 36; RocketMQ has none): a consumer of many queues asks about them in one request:
    # committed/min/max offsets at rebalance, and one held wait for messages on many idle queues
    QUERY_QUEUE_OFFSETS = 981
    WAIT_QUEUE_ARRIVAL = 982
    # pymq admin (issue 33; RocketMQ keeps these in its stats manager): messages in and out per topic
    # since the broker started, the dashboard's per-topic TPS from two polls
    GET_TOPIC_TRAFFIC = 983
    # pymq (issue 32; RocketMQ has none): the secret a broker signs pop receipt handles with, which
    # a slave copies from its master so that, promoted, it accepts the handles its old master issued
    GET_POP_SECRET = 990
    # pymq (issue 34; RocketMQ signs every request): under ACL + TLS a client proves its account once
    # per connection (a challenge, then a signed open binding the account to the connection)
    SESSION_CHALLENGE = 991
    SESSION_OPEN = 992
    # pop consumption (SimpleConsumer), RocketMQ 5's numbers
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    BATCH_ACK_MESSAGE = 200151


#: requests only a nameserver answers (a broker that gets one says it is a broker)
NAMESRV_REQUEST_CODES = frozenset(
    {
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.CONTROLLER_HEARTBEAT,
        RequestCode.CONTROLLER_STATUS,
        RequestCode.CONTROLLER_ELECT_MASTER,
    }
)


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    #: the consumer client a request names is not connected to this broker (RocketMQ's CONSUMER_NOT_ONLINE)
    CONSUMER_NOT_ONLINE = 206
    #: a request with missing or ill-typed header fields (RocketMQ 5's INVALID_PARAMETER)
    INVALID_PARAMETER = 213
    # pop consumption: RocketMQ's NO_MESSAGE / POLLING_TIMEOUT (nothing to receive) and RocketMQ 5's
    # INVALID_RECEIPT_HANDLE (rocketmq-apis Code 40013: forged, stale, expired or already acked)
    NO_MESSAGE = 208
    POLLING_TIMEOUT = 210
    INVALID_RECEIPT_HANDLE = 40013


class LanguageCode(IntEnum):
    JAVA = 0
    PYTHON = 3
