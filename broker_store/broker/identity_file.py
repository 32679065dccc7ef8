"""brokerIdentity and brokerIdentity-temp: the id a controller assigned to this broker, kept on disk.

Used by ``BrokerServer`` in controller mode (``enable_controller_mode``) and by ``broker_id_assignment``,
which applies for an id. RocketMQ 5.1.1+'s registration, whose state follows from the files alone::

    INITIAL                          neither file: ask the controller for its next id (GET_NEXT_BROKER_ID)
      -> write_temp(id, check code)  brokerIdentity-temp written: CREATE_TEMP_METADATA_FILE_DONE
      -> (APPLY_BROKER_ID with that check code, compare-and-set at the controller)
      -> confirm()                   brokerIdentity written, then the temp file removed:
                                     CREATE_METADATA_FILE_DONE (a crash between the two leaves both; the
                                     brokerIdentity file wins, as in RocketMQ)
    A refused apply: clear_temp(), back to INITIAL.

The files hold no address, so the id survives a restart on another address; the register check code,
``<brokerAddr>;<timestampMs>``, is the pending apply's token (re-sent as it is after a restart, whatever
the address now is). Layouts are RocketMQ's own (a store directory moves between the two), one line, no
newline and, unlike this project's other files, no version field::

    brokerIdentity        <clusterName>#<brokerName>#<brokerId>
    brokerIdentity-temp   <clusterName>#<brokerName>#<brokerId>#<registerCheckCode>

A file of another layout, or naming another cluster or broker group than the configuration (RocketMQ's
checkMetadataValid), is refused with a StoreError naming the file: an operator decides, nothing is
overwritten. Writes are crash-safe (``broker_store.durable_file.write_file_atomically``).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

from broker_store.durable_file import write_file_atomically
from broker_store.protocol.errors import StoreError

IDENTITY_FILE = "brokerIdentity"
TEMP_SUFFIX = "-temp"
SEPARATOR = "#"


class RegisterState(enum.Enum):
    """How far the id registration got (RocketMQ's ReplicasManager.RegisterState, up to the files)."""

    INITIAL = "INITIAL"
    CREATE_TEMP_METADATA_FILE_DONE = "CREATE_TEMP_METADATA_FILE_DONE"
    CREATE_METADATA_FILE_DONE = "CREATE_METADATA_FILE_DONE"


@dataclass(frozen=True)
class AssignedIdentity:
    """One identity file's content."""

    cluster_name: str
    broker_name: str
    broker_id: int
    """The controller-assigned id (at least 1)."""
    register_check_code: str | None = None
    """The pending apply's token (``brokerIdentity-temp`` only)."""

    def encode(self) -> bytes:
        fields = [self.cluster_name, self.broker_name, str(self.broker_id)]
        if self.register_check_code is not None:
            fields.append(self.register_check_code)
        return SEPARATOR.join(fields).encode()

    @classmethod
    def decode(cls, text: str, *, temp: bool, source: str) -> AssignedIdentity:
        """Parse one file's content; ``temp`` expects the check code. StoreError names ``source``."""
        fields = text.strip().split(SEPARATOR, 3)
        want = 4 if temp else 3
        layout = "<clusterName>#<brokerName>#<brokerId>" + ("#<registerCheckCode>" if temp else "")
        if len(fields) != want or not all(fields):
            raise StoreError(f"{source} holds {text.strip()!r}, not {layout}; fix or remove it")
        try:
            broker_id = int(fields[2])
        except ValueError:
            broker_id = 0
        if broker_id < 1:
            raise StoreError(f"{source} holds broker id {fields[2]!r}, not an integer of at least 1; fix or remove it")
        return cls(fields[0], fields[1], broker_id, fields[3] if temp else None)


def register_check_code(broker_addr: str, now_ms: int) -> str:
    """RocketMQ's registerCheckCode: ``<brokerAddr>;<timestampMs>``."""
    return f"{broker_addr};{now_ms}"


class BrokerIdentityFiles:
    """The two files in ``store_dir`` for the broker group ``cluster_name``/``broker_name`` (see the module
    docstring). Blocking file I/O: call from a worker thread on a loop."""

    def __init__(self, store_dir: Path, cluster_name: str, broker_name: str) -> None:
        self.path = Path(store_dir) / IDENTITY_FILE
        self.temp_path = Path(store_dir) / (IDENTITY_FILE + TEMP_SUFFIX)
        self._cluster_name, self._broker_name = cluster_name, broker_name

    def load(self) -> tuple[RegisterState, AssignedIdentity | None]:
        """The registration state the files show, and the identity of the newer one."""
        identity = self._read(self.path, temp=False)
        if identity is not None:
            return RegisterState.CREATE_METADATA_FILE_DONE, identity
        identity = self._read(self.temp_path, temp=True)
        if identity is not None:
            return RegisterState.CREATE_TEMP_METADATA_FILE_DONE, identity
        return RegisterState.INITIAL, None

    def write_temp(self, broker_id: int, check_code: str) -> AssignedIdentity:
        """Record the id about to be applied for, with its check code."""
        identity = AssignedIdentity(self._cluster_name, self._broker_name, broker_id, check_code)
        write_file_atomically(self.temp_path, identity.encode())
        return identity

    def confirm(self) -> AssignedIdentity:
        """The apply succeeded: keep the temp file's id in brokerIdentity, then drop the temp file."""
        pending = self._read(self.temp_path, temp=True)
        if pending is None:
            raise StoreError(f"no {self.temp_path} to confirm: apply for an id first")
        return self.persist(pending.broker_id)

    def persist(self, broker_id: int) -> AssignedIdentity:
        """Keep ``broker_id`` in brokerIdentity and drop any pending temp file (in that order)."""
        identity = AssignedIdentity(self._cluster_name, self._broker_name, broker_id)
        if broker_id < 1:
            raise ValueError(f"an assigned broker id is at least 1, got {broker_id}")
        write_file_atomically(self.path, identity.encode())
        self.clear_temp()
        return identity

    def clear_temp(self) -> None:
        """The apply was refused (or is done): forget the pending id."""
        try:
            os.unlink(self.temp_path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"cannot remove {self.temp_path}: {exc.strerror or exc}") from exc

    def _read(self, path: Path, *, temp: bool) -> AssignedIdentity | None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"cannot read {path}: {exc}") from exc
        identity = AssignedIdentity.decode(text, temp=temp, source=str(path))
        if (identity.cluster_name, identity.broker_name) != (self._cluster_name, self._broker_name):
            raise StoreError(f"{path} belongs to {identity.cluster_name}/{identity.broker_name}, but this broker is "
                             f"configured as {self._cluster_name}/{self._broker_name}; fix the configuration or "
                             "remove the file (the controller then assigns a new id)")
        return identity
