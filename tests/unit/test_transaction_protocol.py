"""Transactions without a broker: the coordinator commands on the bytes, messages stamped with
their transaction, the answers a connection hands back, the write options, and what the driver
does with a micro-batch committed before."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from pulsar_spark.client.transaction_registry import Announcements
from pulsar_spark.errors import (
    ConfigurationError,
    TransactionCoordinatorNotFoundError,
    TransactionNotFoundError,
)
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol import transactions as txn_commands
from pulsar_spark.protocol.connection import ClientConnection, Response
from pulsar_spark.protocol.framing import FrameDecoder, encode_command
from pulsar_spark.protocol.payload import encode_payload_section, parse_payload_section
from pulsar_spark.protocol.transactions import TxnId
from pulsar_spark.source import transactional
from pulsar_spark.source.write_options import WriteOptions

Type = pb.BaseCommand.Type
TXN = TxnId(3, 2**63 + 5)  # a least-significant half above 2^63 travels as uint64
URL = {"service.url": "pulsar://localhost:6650"}


def command_of(frame: bytes) -> pb.BaseCommand:
    (only,) = FrameDecoder().feed(frame)
    return only.command


def test_tc_client_connect_names_the_coordinator() -> None:
    command = command_of(txn_commands.tc_client_connect(request_id=7, tc_id=2))
    assert command.type == Type.TC_CLIENT_CONNECT_REQUEST
    assert (command.tcClientConnectRequest.request_id, command.tcClientConnectRequest.tc_id) == (
        7,
        2,
    )


def test_new_txn_sends_the_timeout_in_milliseconds() -> None:
    command = command_of(txn_commands.new_txn(request_id=1, tc_id=4, timeout_ms=60_000))
    assert command.type == Type.NEW_TXN
    assert command.newTxn.txn_ttl_seconds == 60_000
    assert command.newTxn.tc_id == 4


def test_add_partition_and_end_carry_the_id() -> None:
    partitions = ["persistent://public/default/t-partition-0", "persistent://public/default/u"]
    add = command_of(
        txn_commands.add_partition_to_txn(request_id=9, txn=TXN, partitions=partitions)
    )
    assert add.type == Type.ADD_PARTITION_TO_TXN
    body = add.addPartitionToTxn
    assert (body.txnid_most_bits, body.txnid_least_bits) == (3, 2**63 + 5)
    assert list(body.partitions) == partitions
    for commit, action in ((True, pb.TxnAction.COMMIT), (False, pb.TxnAction.ABORT)):
        end = command_of(txn_commands.end_txn(request_id=10, txn=TXN, commit=commit))
        assert end.type == Type.END_TXN
        assert end.endTxn.txn_action == action
        assert (end.endTxn.txnid_most_bits, end.endTxn.txnid_least_bits) == (3, 2**63 + 5)
    assert (pb.TxnAction.COMMIT, pb.TxnAction.ABORT) == (0, 1)


def test_coordinator_count_does_not_create_the_topic() -> None:
    body = command_of(txn_commands.coordinator_count(5)).partitionMetadata
    assert body.topic == "persistent://pulsar/system/transaction_coordinator_assign"
    assert body.HasField("metadata_auto_creation_enabled")
    assert not body.metadata_auto_creation_enabled
    assert txn_commands.coordinator_partition(1) == body.topic + "-partition-1"


def test_send_in_a_transaction() -> None:
    section = encode_payload_section(
        pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"x"
    )

    def sent(txn: TxnId | None) -> pb.CommandSend:
        frame = commands.send(
            producer_id=1,
            sequence_id=0,
            num_messages=1,
            highest_sequence_id=0,
            is_chunk=False,
            section=section,
            txn=txn,
        )
        return command_of(frame).send

    plain = sent(None)
    assert not plain.HasField("txnid_most_bits")
    assert not plain.HasField("txnid_least_bits")
    stamped = sent(TXN)
    assert (stamped.txnid_most_bits, stamped.txnid_least_bits) == (3, 2**63 + 5)


def test_in_transaction_stamps_the_metadata_and_keeps_the_payload() -> None:
    metadata = pb.MessageMetadata(
        producer_name="spark-w-0", sequence_id=41, publish_time=1_700_000_000_000
    )
    metadata.num_messages_in_batch = 3
    payload = bytes(range(256)) * 4
    stamped = txn_commands.in_transaction(encode_payload_section(metadata, payload), TXN)
    parsed = parse_payload_section(stamped)  # verifies the new checksum
    assert parsed.payload == payload
    assert (parsed.metadata.txnid_most_bits, parsed.metadata.txnid_least_bits) == (3, 2**63 + 5)
    parsed.metadata.ClearField("txnid_most_bits")
    parsed.metadata.ClearField("txnid_least_bits")
    assert parsed.metadata == metadata


@pytest.mark.parametrize(
    ("kind", "field", "body"),
    [
        (Type.TC_CLIENT_CONNECT_RESPONSE, "tcClientConnectResponse", {}),
        (Type.NEW_TXN_RESPONSE, "newTxnResponse", {"txnid_most_bits": 3, "txnid_least_bits": 8}),
        (Type.ADD_PARTITION_TO_TXN_RESPONSE, "addPartitionToTxnResponse", {}),
        (Type.END_TXN_RESPONSE, "endTxnResponse", {}),
    ],
)
def test_coordinator_answers_complete_their_request(
    kind: int, field: str, body: dict[str, Any]
) -> None:
    connection = ClientConnection()
    connection.receive_data(
        encode_command(
            pb.BaseCommand(
                type=Type.CONNECTED, connected=pb.CommandConnected(server_version="Pulsar")
            )
        )
    )
    request_id, _ = connection.start_request(
        lambda rid: txn_commands.new_txn(request_id=rid, tc_id=0, timeout_ms=1), "new txn"
    )
    answer = pb.BaseCommand(type=kind)  # type: ignore[arg-type]
    part = getattr(answer, field)
    part.request_id = request_id
    for name, value in body.items():
        setattr(part, name, value)
    (event,) = connection.receive_data(encode_command(answer))
    assert isinstance(event, Response)
    assert event.error is None
    assert event.command is not None
    assert getattr(event.command, field).request_id == request_id


def test_answer_errors_keep_their_code_and_retriable_flag() -> None:
    ok = pb.CommandNewTxnResponse(request_id=1, txnid_most_bits=0, txnid_least_bits=1)
    assert txn_commands.answer_error(ok, "x") is None
    moved = pb.CommandNewTxnResponse(
        request_id=1, error=pb.TransactionCoordinatorNotFound, message="not loaded"
    )
    error = txn_commands.answer_error(moved, "opening a transaction")
    assert isinstance(error, TransactionCoordinatorNotFoundError)
    assert error.retriable
    assert str(error) == (
        "TransactionCoordinatorNotFoundError (server error 20): opening a transaction: not loaded"
    )
    gone = pb.CommandEndTxnResponse(request_id=1, error=pb.TransactionNotFound, message="gone")
    error = txn_commands.answer_error(gone, "committing")
    assert isinstance(error, TransactionNotFoundError)
    assert not error.retriable


# --- options ---------------------------------------------------------------------------------


def write_options(**options: str) -> WriteOptions:
    return WriteOptions.parse({**URL, "topic": "t", **options})


def test_plain_writes_are_not_transactional() -> None:
    assert write_options().transaction_timeout_ms is None
    assert write_options(transactional="false").transaction_timeout_ms is None


def test_transactional_write_options() -> None:
    assert write_options(transactional="true").transaction_timeout_ms == 60_000
    assert (
        write_options(TRANSACTIONAL="True", transactionTimeoutMs="5000").transaction_timeout_ms
        == 5000
    )
    assert (
        write_options(
            transactional="true", **{"pulsar.client.enableTransaction": "true"}
        ).transaction_timeout_ms
        == 60_000
    )


def test_the_registry_topic_is_in_the_written_topics_namespace() -> None:
    assert write_options().transaction_registry is None
    assert (
        write_options(transactional="true").transaction_registry
        == "persistent://public/default/__pulsar_spark_transactions"
    )
    assert (
        WriteOptions.parse(
            {**URL, "topic": "persistent://acme/orders/t", "transactional": "true"}
        ).transaction_registry
        == "persistent://acme/orders/__pulsar_spark_transactions"
    )
    rows_name_topics = WriteOptions.parse({**URL, "transactional": "true"})
    assert (
        rows_name_topics.transaction_registry
        == "persistent://public/default/__pulsar_spark_transactions"
    )
    given = write_options(transactional="true", transactionRegistryTopic="ops/txn/registry")
    assert given.transaction_registry == "persistent://ops/txn/registry"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"transactionRegistryTopic": "r"},
            "option 'transactionRegistryTopic' applies to transactional writes only: set "
            "'transactional' to true, or leave it out",
        ),
        (
            {"transactional": "true", "transactionRegistryTopic": "r-partition-1"},
            "option 'transactionRegistryTopic' names a partition ('r-partition-1'): give a "
            "non-partitioned topic",
        ),
        ({"transactional": "yes"}, "option 'transactional' must be 'true' or 'false', got 'yes'"),
        (
            {"transactional": "true", "transactionTimeoutMs": "0"},
            "option 'transactionTimeoutMs' must be a positive integer, got 0",
        ),
        (
            {"transactional": "true", "transactionTimeoutMs": "1m"},
            "option 'transactionTimeoutMs' must be a positive integer, got '1m'",
        ),
        (
            {"transactionTimeoutMs": "5000"},
            "option 'transactionTimeoutMs' applies to transactional writes only: set "
            "'transactional' to true, or leave it out",
        ),
        (
            {"transactional": "true", "pulsar.client.enableTransaction": "false"},
            "options 'transactional'=true and 'pulsar.client.enableTransaction'=false "
            "contradict each other: 'transactional' alone turns transactions on; leave the "
            "other out",
        ),
    ],
)
def test_bad_transaction_options_fail_naming_the_option(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        write_options(**options)
    assert str(info.value) == message


# --- micro-batches committed once -------------------------------------------------------------


class Coordinators:
    """Stands in for TransactionCoordinators: records what the driver ends."""

    ended: ClassVar[list[tuple[str, TxnId]]] = []

    def __init__(self, lookup: object) -> None:
        pass

    def commit(self, txn: TxnId) -> None:
        self.ended.append(("commit", txn))

    def abort_quietly(self, txn: TxnId) -> None:
        self.ended.append(("abort", txn))


def test_a_micro_batch_is_committed_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(transactional, "TransactionCoordinators", Coordinators)
    monkeypatch.setattr(Coordinators, "ended", [])
    options = write_options(transactional="true", checkpointLocation=str(tmp_path))
    first = [transactional_message((0, 1)), None, transactional_message((1, 2))]
    transactional.commit_epoch(options, first, 7, None)
    assert Coordinators.ended == [("commit", TxnId(0, 1)), ("commit", TxnId(1, 2))]
    assert (tmp_path / "pulsar-transactions" / "7").read_text() == "0,1\n1,2\n"
    # the same micro-batch run again (its commit was not logged): its new transactions are
    # aborted, not committed
    transactional.commit_epoch(options, [transactional_message((0, 3))], 7, None)
    assert Coordinators.ended[2:] == [("abort", TxnId(0, 3))]
    transactional.commit_epoch(options, [transactional_message((0, 4))], 8, None)
    assert Coordinators.ended[3:] == [("commit", TxnId(0, 4))]
    assert sorted(p.name for p in (tmp_path / "pulsar-transactions").iterdir()) == ["7", "8"]


def transactional_message(*ids: tuple[int, int]) -> Any:
    from pulsar_spark.spark.writer import PulsarCommitMessage

    return PulsarCommitMessage({"t": 1}, tuple(ids))


def test_a_plain_stream_write_records_nothing(tmp_path: Path) -> None:
    options = write_options(checkpointLocation=str(tmp_path))
    transactional.commit_epoch(options, [transactional_message()], 3, None)
    assert list(tmp_path.iterdir()) == []


# --- what the registry tells the driver ---------------------------------------------------------


class Registry:
    """Stands in for a TransactionRegistry holding ``announced``; records what the driver does
    with it."""

    def __init__(self, announced: tuple[TxnId, ...]) -> None:
        self.announced = announced
        self.done: list[str] = []
        self.topic, self.name = "persistent://public/default/r", "pulsar-spark-write-w"

    def read(self, lookup: object) -> Announcements:
        return Announcements(self.announced, MessageId(3, len(self.announced) - 1))

    def acknowledge(self, lookup: object, through: MessageId) -> None:
        self.done.append(f"acknowledge {through.ledger_id}:{through.entry_id}")

    def close(self, lookup: object) -> None:
        self.done.append("close")


def test_the_driver_aborts_announced_transactions_spark_did_not_keep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactional, "TransactionCoordinators", Coordinators)
    monkeypatch.setattr(Coordinators, "ended", [])
    registry = Registry((TxnId(0, 1), TxnId(1, 1), TxnId(0, 2), TxnId(0, 2)))
    kept = [transactional_message((0, 1)), transactional_message((0, 2))]
    transactional.commit_batch(write_options(transactional="true"), kept, registry)  # type: ignore[arg-type]
    assert Coordinators.ended == [
        ("abort", TxnId(1, 1)),  # a dropped attempt's, before the kept ones are committed
        ("commit", TxnId(0, 1)),
        ("commit", TxnId(0, 2)),
    ]
    assert registry.done == ["close"]


def test_an_aborted_write_aborts_every_announced_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactional, "TransactionCoordinators", Coordinators)
    monkeypatch.setattr(Coordinators, "ended", [])
    registry = Registry((TxnId(0, 1), TxnId(1, 1)))
    messages = [transactional_message((0, 1)), None]
    transactional.abort_batch(write_options(transactional="true"), messages, registry)  # type: ignore[arg-type]
    assert Coordinators.ended == [("abort", TxnId(0, 1)), ("abort", TxnId(1, 1))]
    assert registry.done == ["close"]


def test_a_micro_batch_acknowledges_what_it_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(transactional, "TransactionCoordinators", Coordinators)
    monkeypatch.setattr(Coordinators, "ended", [])
    options = write_options(transactional="true", checkpointLocation=str(tmp_path))
    registry = Registry((TxnId(0, 7), TxnId(0, 8)))
    transactional.commit_epoch(options, [transactional_message((0, 8))], 4, registry)  # type: ignore[arg-type]
    assert Coordinators.ended == [("abort", TxnId(0, 7)), ("commit", TxnId(0, 8))]
    assert registry.done == ["acknowledge 3:1"]
