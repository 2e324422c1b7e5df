"""One pure builder per command the client sends; each returns the framed bytes.

Builders take keyword arguments named after the wire fields and never do I/O. Request ids,
consumer ids and producer ids are allocated by the caller (the connection).
"""

from __future__ import annotations

from pulsar_spark._version import __version__
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.framing import encode_command, encode_payload_frame
from pulsar_spark.protocol.transactions import TxnId

Type = pb.BaseCommand.Type

# Protocol version we announce. v12 is the floor for what we need (GetLastMessageId, multi-id
# acks); v17 adds ack receipts; we stop at v19 because v20+ lets brokers migrate topics with
# TOPIC_MIGRATED, and v21 changes what AUTO_CONSUME schemas mean — neither of which we handle.
PROTOCOL_VERSION = 19
CLIENT_VERSION = f"pulsar-spark-{__version__}"


def _frame(kind: int, **fields: object) -> bytes:
    command = pb.BaseCommand(type=kind, **fields)  # type: ignore[arg-type]
    return encode_command(command)


def message_id_data(message_id: MessageId) -> pb.MessageIdData:
    ledger, entry = message_id.wire_ids()
    data = pb.MessageIdData(ledgerId=ledger, entryId=entry)
    if message_id.partition >= 0:
        data.partition = message_id.partition
    if message_id.batch_index >= 0:
        data.batch_index = message_id.batch_index
    return data


def connect(
    *,
    auth_method_name: str | None = None,
    auth_data: bytes | None = None,
    proxy_to_broker_url: str | None = None,
) -> bytes:
    """CONNECT; with an auth method the client also says it answers refresh challenges."""
    command = pb.CommandConnect(
        client_version=CLIENT_VERSION,
        protocol_version=PROTOCOL_VERSION,
        feature_flags=pb.FeatureFlags(
            supports_broker_entry_metadata=True,
            supports_auth_refresh=auth_method_name is not None,
        ),
    )
    if auth_method_name is not None:
        command.auth_method_name = auth_method_name
    if auth_data is not None:
        command.auth_data = auth_data
    if proxy_to_broker_url:
        command.proxy_to_broker_url = proxy_to_broker_url
    return _frame(Type.CONNECT, connect=command)


def auth_response(*, auth_method_name: str, auth_data: bytes) -> bytes:
    """The answer to an AUTH_CHALLENGE: fresh credentials of the same method."""
    return _frame(
        Type.AUTH_RESPONSE,
        authResponse=pb.CommandAuthResponse(
            client_version=CLIENT_VERSION,
            response=pb.AuthData(auth_method_name=auth_method_name, auth_data=auth_data),
            protocol_version=PROTOCOL_VERSION,
        ),
    )


def ping() -> bytes:
    return _frame(Type.PING, ping=pb.CommandPing())


def pong() -> bytes:
    return _frame(Type.PONG, pong=pb.CommandPong())


def partitioned_metadata(*, topic: str, request_id: int) -> bytes:
    return _frame(
        Type.PARTITIONED_METADATA,
        partitionMetadata=pb.CommandPartitionedTopicMetadata(topic=topic, request_id=request_id),
    )


def lookup(
    *, topic: str, request_id: int, authoritative: bool, listener_name: str | None = None
) -> bytes:
    command = pb.CommandLookupTopic(topic=topic, request_id=request_id, authoritative=authoritative)
    if listener_name:
        command.advertised_listener_name = listener_name
    return _frame(Type.LOOKUP, lookupTopic=command)


def topics_of_namespace(*, namespace: str, request_id: int) -> bytes:
    return _frame(
        Type.GET_TOPICS_OF_NAMESPACE,
        getTopicsOfNamespace=pb.CommandGetTopicsOfNamespace(
            namespace=namespace, request_id=request_id, mode=pb.CommandGetTopicsOfNamespace.ALL
        ),
    )


def subscribe_reader(
    *,
    topic: str,
    subscription: str,
    consumer_id: int,
    request_id: int,
    start: MessageId,
) -> bytes:
    """A non-durable Exclusive subscription positioned at ``start`` (the Reader pattern)."""
    command = _subscribe_earliest(topic, subscription, consumer_id, request_id, subscription)
    command.subType = pb.CommandSubscribe.Exclusive
    command.durable = False
    command.start_message_id.CopyFrom(message_id_data(start))
    return _frame(Type.SUBSCRIBE, subscribe=command)


def subscribe_durable(
    *,
    topic: str,
    subscription: str,
    consumer_id: int,
    request_id: int,
    consumer_name: str,
    replicated: bool = False,
) -> bytes:
    """A durable Failover subscription, created at the earliest position when it does not
    exist (an existing one keeps its cursor). ``replicated`` asks Apache Pulsar to replicate
    the subscription's position to the other clusters of a geo-replicated topic
    (``replicate_subscription_state``, left out otherwise: a subscription already replicated
    stays so).

    Durable subscriptions ignore ``start_message_id``; only ``initialPosition`` counts, and
    only at creation, so the caller positions a new subscription with a cumulative ack.
    Failover (not Exclusive) lets other Failover consumers of the same name attach too, and
    unlike Shared it accepts cumulative acks.
    """
    command = _subscribe_earliest(topic, subscription, consumer_id, request_id, consumer_name)
    command.subType = pb.CommandSubscribe.Failover
    command.durable = True
    if replicated:
        command.replicate_subscription_state = True
    return _frame(Type.SUBSCRIBE, subscribe=command)


def _subscribe_earliest(
    topic: str, subscription: str, consumer_id: int, request_id: int, consumer_name: str
) -> pb.CommandSubscribe:
    """The fields every SUBSCRIBE of ours shares: a new subscription starts at the earliest
    position, and a missing topic is an error, not created."""
    return pb.CommandSubscribe(
        topic=topic,
        subscription=subscription,
        consumer_id=consumer_id,
        request_id=request_id,
        consumer_name=consumer_name,
        initialPosition=pb.CommandSubscribe.Earliest,
        force_topic_creation=False,
    )


def flow(*, consumer_id: int, permits: int) -> bytes:
    return _frame(Type.FLOW, flow=pb.CommandFlow(consumer_id=consumer_id, messagePermits=permits))


def ack_cumulative(*, consumer_id: int, message_id: MessageId) -> bytes:
    return _frame(
        Type.ACK,
        ack=pb.CommandAck(
            consumer_id=consumer_id,
            ack_type=pb.CommandAck.Cumulative,
            message_id=[message_id_data(message_id)],
        ),
    )


def ack_cumulative_through(
    *,
    consumer_id: int,
    message_id: MessageId,
    request_id: int,
    batch_size: int | None = None,
) -> bytes:
    """A cumulative ACK of every message up to and including ``message_id``, with a receipt.

    A whole-entry id (batch index -1) acknowledges its entry. An id inside a batched entry
    acknowledges the earlier entries and, through ``ack_set``, the entry's messages up to its
    batch index: ``ack_set`` is ``java.util.BitSet.toLongArray()`` of the messages *not yet*
    acknowledged, bits ``[batch_index + 1, batch_size)``. Without ``batch_size`` the set bits
    run to the end of the word holding ``batch_index + 1``: bits past the batch's real size
    name no message, so they only keep the entry from counting as fully acknowledged (the
    safe side). ``batch_size`` is sent when given.
    """
    data = message_id_data(message_id)
    if message_id.batch_index >= 0:
        first_unacked = message_id.batch_index + 1
        end = batch_size if batch_size is not None else (first_unacked // 64 + 1) * 64
        data.ack_set.extend(ack_set_words(first_unacked, end))
        if batch_size is not None:
            data.batch_size = batch_size
    return _frame(
        Type.ACK,
        ack=pb.CommandAck(
            consumer_id=consumer_id,
            ack_type=pb.CommandAck.Cumulative,
            message_id=[data],
            request_id=request_id,
        ),
    )


def ack_set_words(first: int, end: int) -> list[int]:
    """``java.util.BitSet.toLongArray()`` of the bits ``[first, end)``: bit i in word i // 64
    at position i % 64, each word a signed 64-bit value, trailing zero words dropped."""
    bits = sum(1 << i for i in range(first, end))
    words = []
    while bits:
        word = bits & ((1 << 64) - 1)
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
        bits >>= 64
    return words


def seek(
    *,
    consumer_id: int,
    request_id: int,
    publish_time: int | None = None,
    message_id: MessageId | None = None,
) -> bytes:
    """Move a subscription's cursor to the first entry published at or after ``publish_time``
    (ms), or to the entry ``message_id`` names; give one of the two."""
    command = pb.CommandSeek(consumer_id=consumer_id, request_id=request_id)
    if publish_time is not None:
        command.message_publish_time = publish_time
    if message_id is not None:
        command.message_id.CopyFrom(message_id_data(message_id))
    return _frame(Type.SEEK, seek=command)


def get_last_message_id(*, consumer_id: int, request_id: int) -> bytes:
    return _frame(
        Type.GET_LAST_MESSAGE_ID,
        getLastMessageId=pb.CommandGetLastMessageId(consumer_id=consumer_id, request_id=request_id),
    )


def unsubscribe(*, consumer_id: int, request_id: int) -> bytes:
    return _frame(
        Type.UNSUBSCRIBE,
        unsubscribe=pb.CommandUnsubscribe(consumer_id=consumer_id, request_id=request_id),
    )


def close_consumer(*, consumer_id: int, request_id: int) -> bytes:
    return _frame(
        Type.CLOSE_CONSUMER,
        close_consumer=pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=request_id),
    )


def producer(
    *,
    topic: str,
    producer_id: int,
    request_id: int,
    producer_name: str | None,
    schema: pb.Schema | None = None,
    encrypted: bool = False,
) -> bytes:
    """PRODUCER, registering ``schema`` for the topic when given (none: bytes); ``encrypted``
    tells the broker the producer encrypts its messages (a namespace may require it)."""
    command = pb.CommandProducer(topic=topic, producer_id=producer_id, request_id=request_id)
    if encrypted:
        command.encrypted = True
    if schema is not None:
        command.schema.CopyFrom(schema)
    if producer_name:
        command.producer_name = producer_name
    else:
        command.user_provided_producer_name = False
    return _frame(Type.PRODUCER, producer=command)


def get_schema(*, topic: str, request_id: int, schema_version: bytes | None = None) -> bytes:
    """GET_SCHEMA: the topic's latest schema, or the given version of it."""
    command = pb.CommandGetSchema(topic=topic, request_id=request_id)
    if schema_version is not None:
        command.schema_version = schema_version
    return _frame(Type.GET_SCHEMA, getSchema=command)


def close_producer(*, producer_id: int, request_id: int) -> bytes:
    return _frame(
        Type.CLOSE_PRODUCER,
        close_producer=pb.CommandCloseProducer(producer_id=producer_id, request_id=request_id),
    )


def send(
    *,
    producer_id: int,
    sequence_id: int,
    num_messages: int,
    highest_sequence_id: int,
    is_chunk: bool,
    section: bytes,
    txn: TxnId | None = None,
) -> bytes:
    """A SEND frame: the command plus a checksummed payload section (see
    :func:`~pulsar_spark.protocol.payload.encode_payload_section`)."""
    command = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id)
    if txn is not None:  # published in that transaction
        command.txnid_most_bits, command.txnid_least_bits = txn.most_bits, txn.least_bits
    if num_messages > 1:
        command.num_messages = num_messages
    if highest_sequence_id > sequence_id:
        command.highest_sequence_id = highest_sequence_id
    if is_chunk:
        command.is_chunk = True
    base = pb.BaseCommand(type=Type.SEND, send=command)
    return encode_payload_frame(base, section)
