"""One exception tree for all of pymq.

Callers decide what to do from flags, never from message strings:

* ``retriable`` — the same request may succeed if tried again (possibly elsewhere);
* ``invalid_route`` — cached route data is probably stale and should be refreshed.

Broker and nameserver error responses are turned into exceptions once, by
:func:`error_for_response`, which maps the response code to a subclass.
"""

from __future__ import annotations

from typing import ClassVar


class PymqError(Exception):
    """Root of every error raised by pymq."""

    retriable: ClassVar[bool] = False
    invalid_route: ClassVar[bool] = False


# --- configuration -------------------------------------------------------------------------------


class ConfigError(PymqError):
    """A configuration value is missing or invalid."""


# --- wire protocol (sans-IO) -----------------------------------------------------------------------


class ProtocolError(PymqError):
    """The byte stream cannot be understood; the connection it came from is unusable."""


class LocalProtocolError(ProtocolError):
    """We were asked to encode something the protocol cannot carry."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that violate the protocol."""


class FrameTooLargeError(RemoteProtocolError):
    """A frame announced a length above the configured maximum."""


class MessageDecodeError(ProtocolError):
    """A stored message record is truncated or corrupt."""


# --- transport ---------------------------------------------------------------------------------------


class TransportError(PymqError):
    """The network failed us; the request may not have reached the peer."""

    retriable = True
    invalid_route = True


class ConnectError(TransportError):
    """Could not open a connection to the peer."""


class ConnectionClosedError(TransportError):
    """The connection closed before the response arrived."""


class RequestTimeoutError(TransportError):
    """No response arrived within the per-call timeout."""


class ClosedError(PymqError):
    """The object was closed by its owner and cannot be used any more."""


# --- remote error responses --------------------------------------------------------------------------


class RemoteError(PymqError):
    """A peer answered with an error response code."""

    def __init__(self, code: int, remark: str | None = None, addr: str | None = None) -> None:
        self.code = code
        self.remark = remark or ""
        self.addr = addr
        where = f" from {addr}" if addr else ""
        super().__init__(f"[code {code}] {self.remark}{where}".strip())


class SystemError_(RemoteError):
    """The peer failed while handling the request (SYSTEM_ERROR)."""

    retriable = True


class SystemBusyError(RemoteError):
    """The broker is overloaded (SYSTEM_BUSY); back off and retry."""

    retriable = True


class RequestCodeNotSupportedError(RemoteError):
    """The peer does not implement this request code."""


class ServiceNotAvailableError(RemoteError):
    """The broker refuses writes (disk full, shutting down, or it is a slave, fenced, or a master
    whose controller lease lapsed): the route may name an old master, so it is fetched again."""

    retriable = True
    invalid_route = True


class NoPermissionError(RemoteError):
    """The topic or broker does not permit this operation."""

    retriable = True
    invalid_route = True


class TopicNotExistError(RemoteError):
    """The topic is unknown to the nameserver or broker."""

    retriable = True
    invalid_route = True


class MessageIllegalError(RemoteError):
    """The message was rejected as malformed or too large."""


class InvalidRequestError(RemoteError):
    """The request lacks a header field or has one of the wrong type (INVALID_PARAMETER)."""

    def __init__(self, remark: str, addr: str | None = None, code: int = 213) -> None:
        super().__init__(code, remark, addr)


class SubscriptionGroupNotExistError(RemoteError):
    """The consumer group is unknown to the broker."""


class ConsumerNotOnlineError(RemoteError):
    """The consumer client a request names is not connected to the broker (CONSUMER_NOT_ONLINE)."""


class QueryNotFoundError(RemoteError):
    """A query by key or id found nothing."""


class FlushDiskTimeoutError(RemoteError):
    """Stored, but the disk flush did not finish in time (the message is on the broker)."""


class FlushSlaveTimeoutError(RemoteError):
    """Stored, but the slave did not confirm in time (the message is on the master)."""


class SlaveNotAvailableError(RemoteError):
    """Stored, but no slave was in sync (the message is on the master)."""


class InvalidReceiptHandleError(RemoteError):
    """A pop receipt handle the broker refuses (INVALID_RECEIPT_HANDLE): ``reason`` says why.

    ``reason`` is one of ``forged`` (malformed or not signed by this broker), ``expired`` (its
    invisible time is over), ``acked`` (the message was already acked or its handle replaced
    by a change of invisible time), ``stale`` (the broker no longer holds it: revived or
    unknown), ``mismatch`` (another group or topic than the handle's).
    """

    @property
    def reason(self) -> str:
        return self.remark.split(":", 1)[0]


# --- client ------------------------------------------------------------------------------------------


class ClientError(PymqError):
    """Misuse of the client SDK or a state it cannot proceed from."""


class NoRouteError(ClientError):
    """No route (or no writable queue) is known for the topic."""

    retriable = True
    invalid_route = True


class MessageTooLargeError(ClientError):
    """The message exceeds the producer's maximum size."""


# transactional messages (pymq.client.transaction_producer)


class TransactionError(ClientError):
    """A transactional send cannot be made as asked (e.g. a delayed message, a bad local-transaction result)."""


class LocalTransactionError(TransactionError):
    """The local transaction raised: the half message stays unresolved until the broker checks back.

    ``result`` is the half message's send result; the original exception is ``__cause__``.
    """

    def __init__(self, message: str, result: object) -> None:
        super().__init__(message)
        self.result = result


# --- store ---------------------------------------------------------------------------------------------


class StoreError(PymqError):
    """The message store cannot proceed."""


class DiskFullError(StoreError):
    """A store file could not be created or grown: no space left (ENOSPC) or over quota (EDQUOT)."""


class StoreLockedError(StoreError):
    """Another process holds the store directory lock."""


_CODE_TO_ERROR: dict[int, type[RemoteError]] | None = None


def _code_map() -> dict[int, type[RemoteError]]:
    # Imported lazily: pymq.protocol imports this module, so a top-level import would be circular.
    global _CODE_TO_ERROR
    if _CODE_TO_ERROR is None:
        from pymq.protocol.codes import ResponseCode as R

        _CODE_TO_ERROR = {
            R.SYSTEM_ERROR: SystemError_,
            R.SYSTEM_BUSY: SystemBusyError,
            R.REQUEST_CODE_NOT_SUPPORTED: RequestCodeNotSupportedError,
            R.FLUSH_DISK_TIMEOUT: FlushDiskTimeoutError,
            R.SLAVE_NOT_AVAILABLE: SlaveNotAvailableError,
            R.FLUSH_SLAVE_TIMEOUT: FlushSlaveTimeoutError,
            R.MESSAGE_ILLEGAL: MessageIllegalError,
            R.SERVICE_NOT_AVAILABLE: ServiceNotAvailableError,
            R.NO_PERMISSION: NoPermissionError,
            R.TOPIC_NOT_EXIST: TopicNotExistError,
            R.QUERY_NOT_FOUND: QueryNotFoundError,
            R.SUBSCRIPTION_GROUP_NOT_EXIST: SubscriptionGroupNotExistError,
            R.CONSUMER_NOT_ONLINE: ConsumerNotOnlineError,
            R.INVALID_PARAMETER: InvalidRequestError,
            R.INVALID_RECEIPT_HANDLE: InvalidReceiptHandleError,
        }
    return _CODE_TO_ERROR


def error_for_response(code: int, remark: str | None, addr: str | None = None) -> RemoteError:
    """Build the exception that stands for an error response."""
    cls = _code_map().get(code, RemoteError)
    if cls is InvalidRequestError:
        return InvalidRequestError(remark or "", addr, code)
    return cls(code, remark, addr)
