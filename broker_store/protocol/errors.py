"""The one exception hierarchy of broker_store.

Everything the protocol, transport, store and client raise derives from ``RocketMQError``.
Each class carries behaviour flags the caller acts on instead of matching types::

    RocketMQError                       retriable  invalid_route
    +-- ProtocolError                   (bad frame, header or body: peer sent garbage)
    |   +-- FrameTooLargeError
    +-- TransportError                  yes        yes   (connection refused/reset/closed)
    |   +-- RequestTimeoutError         yes        yes
    +-- StoreError                      (store-level failures, corruption, I/O)
    |   +-- CorruptRecordError
    |       +-- RefusedRecordError      (a replica refused a damaged record its HA link brought; .offset, .end)
    +-- ConfigError                     (invalid configuration; names file, field, reason)
    |   +-- CredentialsFileError        (protocol.credentials_file: a credentials file unreadable or malformed)
    |   +-- SettingsUpdateRefused       (controller.runtime_settings: an UPDATE_CONTROLLER_CONFIG refused; .code)
    +-- ImageBuildError                 (the container image could not be built: the failing step's output)
    +-- BrokerResponseError             by code    by code (non-success response; .code, .remark)
        +-- SystemBusyError             yes
        +-- ServiceNotAvailableError    yes        yes
        +-- TopicNotExistError                     yes
        +-- MessageIllegalError
        +-- NoPermissionError                      yes
        +-- FlushDiskTimeoutError       yes
        +-- FlushSlaveTimeoutError      yes
        +-- SlaveNotAvailableError      yes
        +-- PullOffsetMovedError
        +-- AclPermissionError                      (ACL refusal: raised at once, never retried)
        +-- TlsRequiredError                        (a plain connection to a TLS-enforcing server)

``error_for_response(code, remark)`` maps a response code to its class (registry below).
Lower-level exceptions (OSError, struct.error, ValueError) are translated at module boundaries with
``raise X(...) from exc`` and never leak.
"""

from __future__ import annotations

from typing import ClassVar

from broker_store.protocol.codes import ResponseCode


class RocketMQError(Exception):
    retriable: ClassVar[bool] = False
    """Sending the same request again (possibly elsewhere) may succeed."""
    invalid_route: ClassVar[bool] = False
    """The cached route that led here is probably stale; refresh it before retrying."""


class ProtocolError(RocketMQError):
    """The peer sent bytes that do not decode as RocketMQ remoting frames or bodies."""


class FrameTooLargeError(ProtocolError):
    pass


class TransportError(RocketMQError):
    retriable = True
    invalid_route = True


class RequestTimeoutError(TransportError):
    pass


class StoreError(RocketMQError):
    pass


class CorruptRecordError(StoreError):
    pass


class RefusedRecordError(CorruptRecordError):
    """A replica refused a damaged record its HA link brought (nothing of it is kept or acked)."""

    def __init__(self, message: str, *, offset: int, end: int) -> None:
        super().__init__(message)
        self.offset = offset
        """CommitLog offset of the damaged record."""
        self.end = end
        """Where the record ends by its TOTALSIZE (``offset`` + 8 when that is not believable): a replica whose max
        offset reaches it has taken a record there intact."""


class ConfigError(RocketMQError):
    """An invalid setting of a broker, name server, controller or client (a YAML file, a constructor argument, a
    CLI option); the message names the field. The connectors' own is ``ReplicatorConfigError`` (their hierarchy)."""


class ImageBuildError(RocketMQError):
    """A step of ``python -m broker_store image build`` failed; the message names it with its output's tail."""


class BrokerResponseError(RocketMQError):
    """A well-formed response whose code is not SUCCESS."""

    code: int

    def __init__(self, code: int, remark: str | None = None, *, addr: str | None = None) -> None:
        self.code = code
        self.remark = remark or ""
        self.addr = addr
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = str(code)
        where = f" from {addr}" if addr else ""
        super().__init__(f"{name}{where}: {self.remark}" if self.remark else f"{name}{where}")


class SystemBusyError(BrokerResponseError):
    retriable = True


class ServiceNotAvailableError(BrokerResponseError):
    retriable = True
    invalid_route = True


class TopicNotExistError(BrokerResponseError):
    invalid_route = True


class NoWritableQueueError(TopicNotExistError):
    """The topic's route names no broker group with a primary (a failover in progress: the old primary left
    the name server, the new one has not registered yet). Retriable: the route is fetched again."""

    retriable = True


class MessageIllegalError(BrokerResponseError):
    pass


class NoPermissionError(BrokerResponseError):
    invalid_route = True


class FlushDiskTimeoutError(BrokerResponseError):
    retriable = True


class FlushSlaveTimeoutError(BrokerResponseError):
    retriable = True


class SlaveNotAvailableError(BrokerResponseError):
    retriable = True


class PullOffsetMovedError(BrokerResponseError):
    pass


class RetriableSystemError(BrokerResponseError):
    """SYSTEM_ERROR: RocketMQ clients retry these on another broker."""

    retriable = True


ACL_EXCEPTION_MARK = "AclException"
"""ACL 1.0 refusals answer SYSTEM_ERROR with a remark naming RocketMQ's AclException (``acl.decision``)."""


class AclPermissionError(BrokerResponseError):
    """The broker's ACL refused the request (bad signature, unknown key, missing permission). Neither
    retriable nor a stale route: the same credentials get the same answer from every broker."""

    def __init__(self, code: int, remark: str | None = None, *, addr: str | None = None,
                 access_key: str | None = None) -> None:
        super().__init__(code, remark, addr=addr)
        self.access_key = access_key
        """The access key the refused request was signed with (None: the request was not signed)."""
        where = f" by {addr}" if addr else ""
        self.args = (f"permission denied{where} for accessKey={access_key}: {self.remark}",)


TLS_REQUIRED_MARK = "TLS required:"
"""How an enforcing server's answer to a plain client's request starts (``net.tls``)."""


class TlsRequiredError(BrokerResponseError):
    """The server runs tls.server.mode=enforcing and this client connected in plain. Not retriable: every
    attempt without TLS gets the same answer."""


def is_acl_refusal(code: int, remark: str | None) -> bool:
    """A response that is an ACL refusal (ACL 1.0: SYSTEM_ERROR naming AclException)."""
    return code == ResponseCode.SYSTEM_ERROR and remark is not None and ACL_EXCEPTION_MARK in remark


def is_tls_refusal(code: int, remark: str | None) -> bool:
    """A TLS-enforcing server's answer to a request on a plain connection (``TLS_REQUIRED_MARK``)."""
    return code == ResponseCode.SYSTEM_ERROR and remark is not None and remark.startswith(TLS_REQUIRED_MARK)


_REGISTRY: dict[int, type[BrokerResponseError]] = {
    ResponseCode.SYSTEM_ERROR: RetriableSystemError,
    ResponseCode.SYSTEM_BUSY: SystemBusyError,
    ResponseCode.SERVICE_NOT_AVAILABLE: ServiceNotAvailableError,
    ResponseCode.TOPIC_NOT_EXIST: TopicNotExistError,
    ResponseCode.MESSAGE_ILLEGAL: MessageIllegalError,
    ResponseCode.NO_PERMISSION: NoPermissionError,
    ResponseCode.FLUSH_DISK_TIMEOUT: FlushDiskTimeoutError,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: FlushSlaveTimeoutError,
    ResponseCode.SLAVE_NOT_AVAILABLE: SlaveNotAvailableError,
    ResponseCode.PULL_OFFSET_MOVED: PullOffsetMovedError,
}


def error_for_response(code: int, remark: str | None = None, *, addr: str | None = None,
                       access_key: str | None = None) -> BrokerResponseError:
    """The exception instance for a non-success response code (an ACL refusal: ``AclPermissionError``
    naming ``access_key``)."""
    if is_acl_refusal(code, remark):
        return AclPermissionError(code, remark, addr=addr, access_key=access_key)
    if is_tls_refusal(code, remark):
        return TlsRequiredError(code, remark, addr=addr)
    return _REGISTRY.get(code, BrokerResponseError)(code, remark, addr=addr)
