"""The transaction coordinator's commands, without I/O: builders and the reading of answers.

A transaction is opened and ended by a coordinator, one of the partitions of
:data:`COORDINATOR_ASSIGN_TOPIC`: coordinator ``N`` lives on the broker that owns partition
``N``. A client says which coordinator it talks to on a connection (TC_CLIENT_CONNECT_REQUEST),
then opens a transaction (NEW_TXN), names every topic-partition it publishes to in it before
the first message (ADD_PARTITION_TO_TXN) and ends it (END_TXN, commit or abort). Messages
published in a transaction carry its id in CommandSend and in their MessageMetadata.

A transaction id is two 64-bit numbers: the most significant bits are the id of the
coordinator that opened it, so whoever ends it knows where to go.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from pulsar_spark.errors import ServerError, server_error_for
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.framing import encode_command
from pulsar_spark.protocol.payload import MAGIC_CRC32C

Type = pb.BaseCommand.Type

COORDINATOR_ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
"""The partitioned topic whose partition count is the number of coordinators."""

COMMIT = pb.TxnAction.COMMIT
ABORT = pb.TxnAction.ABORT


@dataclass(frozen=True, slots=True, order=True)
class TxnId:
    """A transaction's id: (most significant bits = coordinator id, least significant bits)."""

    most_bits: int
    least_bits: int

    @property
    def coordinator(self) -> int:
        return self.most_bits

    def __str__(self) -> str:
        return f"({self.most_bits},{self.least_bits})"


_U32 = struct.Struct(">I")
_CRC_BLOCK = struct.Struct(">HI")  # [0x0e01][u32 CRC32C]


def in_transaction(section: bytes, txn: TxnId) -> bytes:
    """A SEND payload section of ours (``[0x0e01][crc32c][u32 size][metadata][payload]``)
    with ``txn``'s id added to its MessageMetadata, which is where the broker's dispatchers
    look for it when they drop aborted messages.

    The fields are appended to the serialized metadata (a protobuf parser merges fields in any
    order), so the payload is copied once and checksummed again, never re-encoded.
    """
    view = memoryview(section)
    magic, _ = _CRC_BLOCK.unpack_from(view, 0)
    if magic != MAGIC_CRC32C:
        raise ValueError("not a payload section with a checksum")
    size = _U32.unpack_from(view, _CRC_BLOCK.size)[0]
    start = _CRC_BLOCK.size + _U32.size
    extra = pb.MessageMetadata(
        txnid_least_bits=txn.least_bits, txnid_most_bits=txn.most_bits
    ).SerializePartialToString()
    covered = b"".join(
        (_U32.pack(size + len(extra)), view[start : start + size], extra, view[start + size :])
    )
    return _CRC_BLOCK.pack(MAGIC_CRC32C, crc32c.crc32c(covered)) + covered


def coordinator_partition(tc_id: int) -> str:
    """The topic-partition whose owner hosts coordinator ``tc_id``."""
    return f"{COORDINATOR_ASSIGN_TOPIC}-partition-{tc_id}"


def coordinator_count(request_id: int) -> bytes:
    """Partitioned metadata of the coordinators' topic, asking the broker not to create it."""
    command = pb.CommandPartitionedTopicMetadata(
        topic=COORDINATOR_ASSIGN_TOPIC, request_id=request_id, metadata_auto_creation_enabled=False
    )
    return encode_command(pb.BaseCommand(type=Type.PARTITIONED_METADATA, partitionMetadata=command))


def tc_client_connect(*, request_id: int, tc_id: int) -> bytes:
    return encode_command(
        pb.BaseCommand(
            type=Type.TC_CLIENT_CONNECT_REQUEST,
            tcClientConnectRequest=pb.CommandTcClientConnectRequest(
                request_id=request_id, tc_id=tc_id
            ),
        )
    )


def new_txn(*, request_id: int, tc_id: int, timeout_ms: int) -> bytes:
    """NEW_TXN; the timeout travels in ``txn_ttl_seconds``, in milliseconds, as Apache's
    clients send it and its coordinator reads it."""
    command = pb.CommandNewTxn(request_id=request_id, txn_ttl_seconds=timeout_ms, tc_id=tc_id)
    return encode_command(pb.BaseCommand(type=Type.NEW_TXN, newTxn=command))


def add_partition_to_txn(*, request_id: int, txn: TxnId, partitions: list[str]) -> bytes:
    command = pb.CommandAddPartitionToTxn(
        request_id=request_id,
        txnid_least_bits=txn.least_bits,
        txnid_most_bits=txn.most_bits,
        partitions=partitions,
    )
    return encode_command(pb.BaseCommand(type=Type.ADD_PARTITION_TO_TXN, addPartitionToTxn=command))


def end_txn(*, request_id: int, txn: TxnId, commit: bool) -> bytes:
    command = pb.CommandEndTxn(
        request_id=request_id,
        txnid_least_bits=txn.least_bits,
        txnid_most_bits=txn.most_bits,
        txn_action=COMMIT if commit else ABORT,
    )
    return encode_command(pb.BaseCommand(type=Type.END_TXN, endTxn=command))


def answer_error(
    body: pb.CommandTcClientConnectResponse
    | pb.CommandNewTxnResponse
    | pb.CommandAddPartitionToTxnResponse
    | pb.CommandEndTxnResponse,
    what: str,
) -> ServerError | None:
    """The error a coordinator's answer carries (these answers hold their own error fields
    instead of coming as CommandError), or None when it succeeded."""
    if not body.HasField("error"):
        return None
    return server_error_for(body.error, f"{what}: {body.message}")
