// Apache Pulsar's Java client on command, for the interop tests (tests/support/java_peer.py).
//
//     java -cp <jars>:<classes> JavaPeer <service URL>
//
// reads one JSON request a line from stdin and answers each with one JSON line on stdout:
//
//   {"op": "produce", "topic": T, "schema": S, "producer": P, "messages": [M, ...]}
//       -> {"ids": [ID, ...]}
//   {"op": "consume", "topic": T, "schema": S, "count": N, "privateKeys": K}
//       -> {"messages": [R, ...]}  (N messages, from the earliest, or fewer after 10 s)
//   any failure -> {"error": "Class: message"}
//
// S names a schema: {"type": "BYTES" | "STRING" | "INT64" | ... | "DATE" | "TIME" |
// "TIMESTAMP" | "INSTANT" | "LOCAL_DATE" | "LOCAL_TIME" | "LOCAL_DATE_TIME" | "AUTO_CONSUME"},
// {"type": "AVRO" | "JSON", "definition": <Avro schema text>} (flat records of primitive
// fields), {"type": "KEY_VALUE", "key": S, "value": S, "encoding": "INLINE" | "SEPARATED"} or
// {"type": "PROTOBUF_NATIVE", "files": <FileDescriptorSet, hex>, "root": <message name>}: the
// descriptor set's files built with protobuf's Descriptors, the schema's data written by the
// client's ProtobufNativeSchemaUtils, values DynamicMessages (a producer of
// Schema.AUTO_PRODUCE_BYTES over the client's GenericProtobufNativeSchema, for there is no
// generated class to give Schema.PROTOBUF_NATIVE; consumers decode with that schema itself).
// P sets the producer: "compression" (LZ4, ZLIB, ZSTD, SNAPPY), "batching" (bool), "batcher"
// ("KEY_BASED"), "batchingMaxMessages", "chunking" (bool), "chunkMaxMessageSize" (bytes),
// "routing" (RoundRobinPartition, SinglePartition), "hashing" (JavaStringHash,
// Murmur3_32Hash), "encryptionKeys" (key names: .addEncryptionKey each) with "publicKeys" (K);
// K maps key names to PEM files, read by the peer's CryptoKeyReader (a consumer given
// "privateKeys" fails on a message it cannot decrypt). M is {"value", "key", "keyBytes" (hex), "properties", "eventTime"}.
// Values travel as JSON: BYTES in hex, DATE, TIME and TIMESTAMP as epoch milliseconds, the
// java.time types as their ISO text, records and KeyValues as objects, protobuf messages as
// protobuf's JSON mapping (JsonFormat, proto field names).
// ID is {"ledger", "entry", "partition", "batchIndex"}; R adds to it "value", "data" (the
// payload, hex), "key", "keyBytes" (hex, when the key is base64 on the wire), "orderingKey",
// "properties", "eventTime", "publishTime", "sequenceId", "replicatedFrom" (null unless
// isReplicated()), "schemaVersion" (hex), "topic", "producerName" and, for AUTO_CONSUME,
// "schemaType".

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.MessageOrBuilder;
import com.google.protobuf.util.JsonFormat;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.BatcherBuilder;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.ConsumerBuilder;
import org.apache.pulsar.client.api.ConsumerCryptoFailureAction;
import org.apache.pulsar.client.api.CryptoKeyReader;
import org.apache.pulsar.client.api.EncryptionKeyInfo;
import org.apache.pulsar.client.api.HashingScheme;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerBuilder;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.TypedMessageBuilder;
import org.apache.pulsar.client.api.schema.Field;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.apache.pulsar.client.api.schema.GenericRecordBuilder;
import org.apache.pulsar.client.api.schema.GenericSchema;
import org.apache.pulsar.client.api.schema.KeyValueSchema;
import org.apache.pulsar.client.impl.schema.ProtobufNativeSchemaUtils;
import org.apache.pulsar.client.impl.schema.generic.GenericProtobufNativeSchema;
import org.apache.pulsar.common.schema.KeyValue;
import org.apache.pulsar.common.schema.KeyValueEncodingType;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaType;

public final class JavaPeer {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final HexFormat HEX = HexFormat.of();

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[0]).build()) {
            out.println("{\"ready\": true}");
            String line;
            while ((line = in.readLine()) != null) {
                ObjectNode answer;
                try {
                    JsonNode request = JSON.readTree(line);
                    answer = switch (request.get("op").asText()) {
                        case "produce" -> produce(client, request);
                        case "consume" -> consume(client, request);
                        default -> throw new IllegalArgumentException("unknown op " + request);
                    };
                } catch (Exception e) {
                    answer = JSON.createObjectNode();
                    answer.put("error", e.getClass().getName() + ": " + e.getMessage());
                }
                out.println(JSON.writeValueAsString(answer));
            }
        }
    }

    // ------------------------------------------------------------------ schemas

    @SuppressWarnings({"unchecked", "rawtypes"})
    private static Schema<Object> schema(JsonNode spec) throws Exception {
        String type = spec.get("type").asText();
        Schema schema = switch (type) {
            case "BYTES" -> Schema.BYTES;
            case "STRING" -> Schema.STRING;
            case "BOOLEAN" -> Schema.BOOL;
            case "INT8" -> Schema.INT8;
            case "INT16" -> Schema.INT16;
            case "INT32" -> Schema.INT32;
            case "INT64" -> Schema.INT64;
            case "FLOAT" -> Schema.FLOAT;
            case "DOUBLE" -> Schema.DOUBLE;
            case "DATE" -> Schema.DATE;
            case "TIME" -> Schema.TIME;
            case "TIMESTAMP" -> Schema.TIMESTAMP;
            case "INSTANT" -> Schema.INSTANT;
            case "LOCAL_DATE" -> Schema.LOCAL_DATE;
            case "LOCAL_TIME" -> Schema.LOCAL_TIME;
            case "LOCAL_DATE_TIME" -> Schema.LOCAL_DATE_TIME;
            case "AUTO_CONSUME" -> Schema.AUTO_CONSUME();
            case "AVRO", "JSON" -> Schema.generic(SchemaInfo.builder()
                    .name("")
                    .type(SchemaType.valueOf(type))
                    .schema(spec.get("definition").asText().getBytes(StandardCharsets.UTF_8))
                    .properties(Map.of())
                    .build());
            case "KEY_VALUE" -> Schema.KeyValue(
                    schema(spec.get("key")),
                    schema(spec.get("value")),
                    KeyValueEncodingType.valueOf(spec.get("encoding").asText()));
            case "PROTOBUF_NATIVE" -> Schema.AUTO_PRODUCE_BYTES(protobufNative(spec));
            default -> throw new IllegalArgumentException("unknown schema " + type);
        };
        return (Schema<Object>) schema;
    }

    /** The client's schema of DynamicMessages for {@code spec}, what consumers decode with. */
    private static Schema<?> protobufNative(JsonNode spec) throws Exception {
        return GenericProtobufNativeSchema.of(SchemaInfo.builder()
                .name("")
                .type(SchemaType.PROTOBUF_NATIVE)
                .schema(ProtobufNativeSchemaUtils.serialize(descriptor(spec)))
                .properties(Map.of())
                .build());
    }

    /** The message {@code spec.root} of the files of {@code spec.files}, built in order. */
    private static Descriptor descriptor(JsonNode spec) throws Exception {
        FileDescriptorSet files =
                FileDescriptorSet.parseFrom(HEX.parseHex(spec.get("files").asText()));
        Map<String, FileDescriptor> built = new HashMap<>();
        FileDescriptor last = null;
        for (FileDescriptorProto file : files.getFileList()) {
            FileDescriptor[] imports = file.getDependencyList().stream()
                    .map(built::get).toArray(FileDescriptor[]::new);
            last = FileDescriptor.buildFrom(file, imports);
            built.put(file.getName(), last);
        }
        String root = spec.get("root").asText();
        for (FileDescriptor file : built.values()) {
            Descriptor found = file.findMessageTypeByName(
                    root.substring(root.lastIndexOf('.') + 1));
            if (found != null && found.getFullName().equals(root)) {
                return found;
            }
        }
        throw new IllegalArgumentException("no message " + root);
    }

    /** A JSON value as the Java object ``spec``'s schema encodes. */
    private static Object toJava(JsonNode spec, Schema<?> schema, JsonNode value)
            throws Exception {
        if (value == null || value.isNull()) {
            return null;
        }
        String type = spec.get("type").asText();
        return switch (type) {
            case "BYTES" -> HEX.parseHex(value.asText());
            case "STRING" -> value.asText();
            case "BOOLEAN" -> value.asBoolean();
            case "INT8" -> (byte) value.asInt();
            case "INT16" -> (short) value.asInt();
            case "INT32" -> value.asInt();
            case "INT64" -> value.asLong();
            case "FLOAT" -> (float) value.asDouble();
            case "DOUBLE" -> value.asDouble();
            case "DATE" -> new java.util.Date(value.asLong());
            case "TIME" -> new java.sql.Time(value.asLong());
            case "TIMESTAMP" -> new java.sql.Timestamp(value.asLong());
            case "INSTANT" -> Instant.parse(value.asText());
            case "LOCAL_DATE" -> LocalDate.parse(value.asText());
            case "LOCAL_TIME" -> LocalTime.parse(value.asText());
            case "LOCAL_DATE_TIME" -> LocalDateTime.parse(value.asText());
            case "AVRO", "JSON" -> {
                GenericRecordBuilder builder = ((GenericSchema<?>) schema).newRecordBuilder();
                Iterator<Map.Entry<String, JsonNode>> fields = value.fields();
                while (fields.hasNext()) {
                    Map.Entry<String, JsonNode> field = fields.next();
                    builder.set(field.getKey(), plain(field.getValue()));
                }
                yield builder.build();
            }
            case "KEY_VALUE" -> keyValue(spec, schema, value);
            case "PROTOBUF_NATIVE" -> {
                DynamicMessage.Builder message = DynamicMessage.newBuilder(descriptor(spec));
                JsonFormat.parser().merge(JSON.writeValueAsString(value), message);
                yield message.build().toByteArray();
            }
            default -> throw new IllegalArgumentException("cannot produce " + type);
        };
    }

    private static KeyValue<Object, Object> keyValue(
            JsonNode spec, Schema<?> schema, JsonNode value) throws Exception {
        KeyValueSchema<?, ?> kvSchema = (KeyValueSchema<?, ?>) schema;
        return new KeyValue<>(
                toJava(spec.get("key"), kvSchema.getKeySchema(), value.get("key")),
                toJava(spec.get("value"), kvSchema.getValueSchema(), value.get("value")));
    }

    private static Object plain(JsonNode value) {
        if (value.isNull()) {
            return null;
        } else if (value.isBoolean()) {
            return value.asBoolean();
        } else if (value.isIntegralNumber()) {
            return value.asLong();
        } else if (value.isNumber()) {
            return value.asDouble();
        }
        return value.asText();
    }

    /** A value a consumer returned, as JSON. */
    private static JsonNode toJson(Object value) throws Exception {
        if (value == null) {
            return JSON.nullNode();
        } else if (value instanceof byte[] bytes) {
            return JSON.getNodeFactory().textNode(HEX.formatHex(bytes));
        } else if (value instanceof java.util.Date date) {
            return JSON.getNodeFactory().numberNode(date.getTime());
        } else if (value instanceof Instant || value instanceof LocalDate
                || value instanceof LocalTime || value instanceof LocalDateTime) {
            return JSON.getNodeFactory().textNode(value.toString());
        } else if (value instanceof KeyValue<?, ?> kv) {
            ObjectNode node = JSON.createObjectNode();
            node.set("key", toJson(kv.getKey()));
            node.set("value", toJson(kv.getValue()));
            return node;
        } else if (value instanceof GenericRecord record) {
            Object native_ = record.getSchemaType() == SchemaType.AVRO
                    || record.getSchemaType() == SchemaType.JSON ? null : record.getNativeObject();
            if (native_ != null) {
                return toJson(native_);
            }
            ObjectNode node = JSON.createObjectNode();
            for (Field field : record.getFields()) {
                node.set(field.getName(), toJson(record.getField(field)));
            }
            return node;
        } else if (value instanceof MessageOrBuilder message) {
            return JSON.readTree(JsonFormat.printer().preservingProtoFieldNames().print(message));
        } else if (value instanceof CharSequence text) {
            return JSON.getNodeFactory().textNode(text.toString());
        }
        return JSON.valueToTree(value);
    }

    // ------------------------------------------------------------------ produce / consume

    private static ObjectNode produce(PulsarClient client, JsonNode request) throws Exception {
        JsonNode spec = request.get("schema");
        Schema<Object> schema = schema(spec);
        JsonNode options = request.path("producer");
        ProducerBuilder<Object> builder = client.newProducer(schema)
                .topic(request.get("topic").asText())
                .enableBatching(options.path("batching").asBoolean(false))
                .batchingMaxPublishDelay(
                        options.path("batchingDelayMs").asLong(10), TimeUnit.MILLISECONDS)
                .batchingMaxMessages(options.path("batchingMaxMessages").asInt(1000))
                .blockIfQueueFull(true)
                .sendTimeout(30, TimeUnit.SECONDS);
        if (options.has("compression")) {
            builder.compressionType(CompressionType.valueOf(options.get("compression").asText()));
        }
        if (options.path("batcher").asText("").equals("KEY_BASED")) {
            builder.batcherBuilder(BatcherBuilder.KEY_BASED);
        }
        if (options.path("chunking").asBoolean(false)) {
            builder.enableChunking(true).enableBatching(false);
            if (options.has("chunkMaxMessageSize")) {
                builder.chunkMaxMessageSize(options.get("chunkMaxMessageSize").asInt());
            }
        }
        if (options.has("routing")) {
            builder.messageRoutingMode(MessageRoutingMode.valueOf(options.get("routing").asText()));
        }
        if (options.has("hashing")) {
            builder.hashingScheme(HashingScheme.valueOf(options.get("hashing").asText()));
        }
        if (options.has("encryptionKeys")) {
            for (JsonNode name : options.get("encryptionKeys")) {
                builder.addEncryptionKey(name.asText());
            }
            builder.cryptoKeyReader(new PemKeyReader(options.path("publicKeys")));
        }
        List<CompletableFuture<MessageId>> sent = new ArrayList<>();
        try (Producer<Object> producer = builder.create()) {
            for (JsonNode message : request.get("messages")) {
                TypedMessageBuilder<Object> out = producer.newMessage();
                Object value = toJava(spec, schema, message.get("value"));
                if (value != null) {
                    out.value(value);
                } else if (!spec.get("type").asText().equals("KEY_VALUE")) {
                    out.value(null);
                }
                if (message.hasNonNull("key")) {
                    out.key(message.get("key").asText());
                }
                if (message.hasNonNull("keyBytes")) {
                    out.keyBytes(HEX.parseHex(message.get("keyBytes").asText()));
                }
                if (message.hasNonNull("eventTime")) {
                    out.eventTime(message.get("eventTime").asLong());
                }
                message.path("properties").fields()
                        .forEachRemaining(p -> out.property(p.getKey(), p.getValue().asText()));
                sent.add(out.sendAsync());
            }
            producer.flush();
        }
        ArrayNode ids = JSON.createArrayNode();
        for (CompletableFuture<MessageId> id : sent) {
            ids.add(messageId(id.get(30, TimeUnit.SECONDS)));
        }
        ObjectNode answer = JSON.createObjectNode();
        answer.set("ids", ids);
        return answer;
    }

    private static ObjectNode consume(PulsarClient client, JsonNode request) throws Exception {
        JsonNode spec = request.get("schema");
        int count = request.get("count").asInt();
        ArrayNode messages = JSON.createArrayNode();
        @SuppressWarnings("unchecked")
        Schema<Object> schema = spec.get("type").asText().equals("PROTOBUF_NATIVE")
                ? (Schema<Object>) protobufNative(spec) : schema(spec);
        ConsumerBuilder<Object> builder = client.newConsumer(schema)
                .topic(request.get("topic").asText())
                .subscriptionName("java-peer-" + UUID.randomUUID())
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest);
        if (request.has("privateKeys")) {
            builder.cryptoKeyReader(new PemKeyReader(request.get("privateKeys")))
                    .cryptoFailureAction(ConsumerCryptoFailureAction.FAIL);
        }
        try (Consumer<Object> consumer = builder.subscribe()) {
            while (messages.size() < count) {
                Message<Object> message = consumer.receive(10, TimeUnit.SECONDS);
                if (message == null) {
                    break;
                }
                messages.add(describe(message));
                consumer.acknowledge(message);
            }
        }
        ObjectNode answer = JSON.createObjectNode();
        answer.set("messages", messages);
        return answer;
    }

    private static ObjectNode describe(Message<Object> message) throws Exception {
        ObjectNode node = messageId(message.getMessageId());
        node.set("value", toJson(message.getValue()));
        Object value = message.getValue();
        if (value instanceof GenericRecord record) {
            node.put("schemaType", record.getSchemaType().name());
        }
        node.put("data", HEX.formatHex(message.getData()));
        node.put("key", message.hasKey() ? message.getKey() : null);
        if (message.hasBase64EncodedKey()) {
            node.put("keyBytes", HEX.formatHex(message.getKeyBytes()));
        }
        if (message.hasOrderingKey()) {
            node.put("orderingKey", HEX.formatHex(message.getOrderingKey()));
        }
        ObjectNode properties = node.putObject("properties");
        message.getProperties().forEach(properties::put);
        node.put("eventTime", message.getEventTime());
        node.put("publishTime", message.getPublishTime());
        node.put("sequenceId", message.getSequenceId());
        node.put("replicatedFrom",
                message.isReplicated() ? message.getReplicatedFrom() : null);
        byte[] version = message.getSchemaVersion();
        node.put("schemaVersion", version == null ? null : HEX.formatHex(version));
        node.put("topic", message.getTopicName());
        node.put("producerName", message.getProducerName());
        return node;
    }

    private static ObjectNode messageId(MessageId id) {
        ObjectNode node = JSON.createObjectNode();
        MessageIdAdv adv = (MessageIdAdv) id;
        node.put("ledger", adv.getLedgerId());
        node.put("entry", adv.getEntryId());
        node.put("partition", adv.getPartitionIndex());
        node.put("batchIndex", adv.getBatchIndex());
        return node;
    }

    /** Keys from PEM files, one a key name; the same reader serves public or private keys. */
    private static final class PemKeyReader implements CryptoKeyReader {
        private final Map<String, String> files = new HashMap<>();

        PemKeyReader(JsonNode files) {
            files.fields().forEachRemaining(f -> this.files.put(f.getKey(), f.getValue().asText()));
        }

        @Override
        public EncryptionKeyInfo getPublicKey(String keyName, Map<String, String> metadata) {
            return read(keyName, metadata);
        }

        @Override
        public EncryptionKeyInfo getPrivateKey(String keyName, Map<String, String> metadata) {
            return read(keyName, metadata);
        }

        private EncryptionKeyInfo read(String keyName, Map<String, String> metadata) {
            String file = files.get(keyName);
            if (file == null) {
                return null;
            }
            try {
                return new EncryptionKeyInfo(Files.readAllBytes(Path.of(file)), metadata);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
    }
}
