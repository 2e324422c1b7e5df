/*
 * The official TubeMQ Java client, driven from the tests.
 *
 *   TubeMQProbe produce <master host:port> <topic>
 *       sends three fixed messages: with attributes and system headers, plain, and with
 *       attributes only; prints "SENT <partition> <message id>" per message
 *   TubeMQProbe consume <master host:port> <topic> <group> <count> [<filter>[,<filter>...]]
 *       reads <count> messages from the first offset, of the message types <filter> only when
 *       given (subscribe's filterConds); prints
 *       "GOT <hex value> <attribute string or -> <msgType or -> <msgTime or ->" per message
 *   TubeMQProbe produce-typed <master host:port> <topic> <value prefix> <type or ->...
 *       sends one message per argument after the prefix, with that message type ("-": none)
 *       and the value "<prefix> <index>"; prints "SENT <partition> <message id>" per message
 *   TubeMQProbe produce-timed <master host:port> <topic> <count> <size>
 *       sends <count> messages of <size> bytes with the asynchronous sendMessage, waits for
 *       every acknowledgement; prints "PRODUCED <acknowledged> <milliseconds>"
 *   TubeMQProbe consume-timed <master host:port> <topic> <group> <count>
 *       reads <count> messages from the first offset with getMessage/confirmConsume; prints
 *       "CONSUMED <received> <milliseconds from subscribing to the last message> <milliseconds
 *       from the first message to the last>"
 * Exit status 0 when every message was sent or received.
 */

import java.nio.charset.StandardCharsets;
import org.apache.inlong.tubemq.client.config.ConsumerConfig;
import org.apache.inlong.tubemq.client.config.TubeClientConfig;
import org.apache.inlong.tubemq.client.consumer.ConsumePosition;
import org.apache.inlong.tubemq.client.consumer.ConsumerResult;
import org.apache.inlong.tubemq.client.consumer.PullMessageConsumer;
import org.apache.inlong.tubemq.client.factory.MessageSessionFactory;
import org.apache.inlong.tubemq.client.factory.TubeSingleSessionFactory;
import org.apache.inlong.tubemq.client.producer.MessageProducer;
import org.apache.inlong.tubemq.client.exception.TubeClientException;
import org.apache.inlong.tubemq.client.producer.MessageSentCallback;
import org.apache.inlong.tubemq.client.producer.MessageSentResult;
import org.apache.inlong.tubemq.corebase.Message;

public class TubeMQProbe {

    public static void main(String[] args) throws Throwable {
        TubeClientConfig clientConfig = new TubeClientConfig(args[1]);
        MessageSessionFactory factory = new TubeSingleSessionFactory(clientConfig);
        boolean ok;
        switch (args[0]) {
            case "produce":
                ok = produce(factory, args[2]);
                break;
            case "produce-timed":
                ok = produceTimed(factory, args[2], Integer.parseInt(args[3]),
                        Integer.parseInt(args[4]));
                break;
            case "consume-timed":
                ok = consumeTimed(factory, args[1], args[2], args[3], Integer.parseInt(args[4]));
                break;
            case "produce-typed":
                ok = produceTyped(factory, args[2], args[3],
                        java.util.Arrays.copyOfRange(args, 4, args.length));
                break;
            default:
                java.util.TreeSet<String> filters = null;
                if (args.length > 5) {
                    filters = new java.util.TreeSet<>(java.util.Arrays.asList(args[5].split(",")));
                }
                ok = consume(factory, args[1], args[2], args[3], Integer.parseInt(args[4]),
                        filters);
        }
        factory.shutdown();
        System.exit(ok ? 0 : 1);
    }

    private static boolean produce(MessageSessionFactory factory, String topic) throws Throwable {
        Message full = new Message(topic, "java value 1".getBytes(StandardCharsets.UTF_8));
        full.setAttrKeyVal("color", "blue");
        full.setAttrKeyVal("size", "9");
        full.putSystemHeader("jtype", "202611251500");
        Message plain = new Message(topic, "java value 2".getBytes(StandardCharsets.UTF_8));
        Message attrsOnly = new Message(topic, new byte[] {0, 1, 2, (byte) 0xff});
        attrsOnly.setAttrKeyVal("only", "attrs");
        return send(factory, topic, new Message[] {full, plain, attrsOnly});
    }

    private static boolean produceTyped(MessageSessionFactory factory, String topic,
            String prefix, String[] types) throws Throwable {
        Message[] messages = new Message[types.length];
        for (int i = 0; i < types.length; i++) {
            messages[i] = new Message(topic,
                    (prefix + " " + i).getBytes(StandardCharsets.UTF_8));
            if (!types[i].equals("-")) {
                messages[i].putSystemHeader(types[i], null);
            }
        }
        return send(factory, topic, messages);
    }

    /** Sends each message with the synchronous sendMessage; whether every one was stored. */
    private static boolean send(MessageSessionFactory factory, String topic, Message[] messages)
            throws Throwable {
        MessageProducer producer = factory.createProducer();
        producer.publish(topic);
        boolean ok = true;
        for (Message m : messages) {
            MessageSentResult r = producer.sendMessage(m);
            ok &= r.isSuccess();
            System.out.println(r.isSuccess()
                    ? "SENT " + r.getPartition().getPartitionId() + " " + r.getMessageId()
                    : "FAILED " + r.getErrCode() + " " + r.getErrMsg());
        }
        producer.shutdown();
        return ok;
    }

    private static boolean consume(MessageSessionFactory factory, String master, String topic,
            String group, int count, java.util.TreeSet<String> filters) throws Throwable {
        int received = pull(factory, master, topic, group, count, 90_000L, 50, filters, messages -> {
            for (Message m : messages) {
                StringBuilder hex = new StringBuilder();
                for (byte b : m.getData()) {
                    hex.append(String.format("%02x", b));
                }
                System.out.println("GOT " + (hex.length() == 0 ? "-" : hex) + " "
                        + orDash(m.getAttribute()) + " " + orDash(m.getMsgType()) + " "
                        + orDash(m.getMsgTime()));
            }
        });
        return received >= count;
    }

    /** Reads from the first offset with a new group until count messages came or the time
     * ran out, of the types in filters only unless null, handing each non-empty result to
     * each; how many messages came. */
    private static int pull(MessageSessionFactory factory, String master, String topic,
            String group, int count, long timeoutMs, long pauseMs,
            java.util.TreeSet<String> filters,
            java.util.function.Consumer<java.util.List<Message>> each) throws Throwable {
        ConsumerConfig config = new ConsumerConfig(master, group);
        config.setConsumePosition(ConsumePosition.CONSUMER_FROM_FIRST_OFFSET);
        PullMessageConsumer consumer = factory.createPullConsumer(config);
        consumer.subscribe(topic, filters);
        consumer.completeSubscribe();
        int received = 0;
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (received < count && System.currentTimeMillis() < deadline) {
            if (!consumer.isPartitionsReady(1000)) {
                continue;
            }
            ConsumerResult res = consumer.getMessage();
            if (!res.isSuccess()) {
                Thread.sleep(pauseMs);
                continue;
            }
            if (!res.getMessageList().isEmpty()) {
                each.accept(res.getMessageList());
            }
            received += res.getMessageList().size();
            consumer.confirmConsume(res.getConfirmContext(), true);
        }
        consumer.shutdown();
        return received;
    }

    private static boolean produceTimed(MessageSessionFactory factory, String topic, int count,
            int size) throws Throwable {
        MessageProducer producer = factory.createProducer();
        producer.publish(topic);
        byte[] body = new byte[size];
        java.util.Arrays.fill(body, (byte) 'x');
        java.util.concurrent.CountDownLatch pending = new java.util.concurrent.CountDownLatch(count);
        java.util.concurrent.atomic.AtomicInteger acked = new java.util.concurrent.atomic.AtomicInteger();
        MessageSentCallback callback = new MessageSentCallback() {
            @Override
            public void onMessageSent(MessageSentResult result) {
                if (result.isSuccess()) {
                    acked.incrementAndGet();
                }
                pending.countDown();
            }

            @Override
            public void onException(Throwable e) {
                pending.countDown();
            }
        };
        long start = System.nanoTime();
        for (int i = 0; i < count; i++) {
            Message message = new Message(topic, body);
            while (true) {
                try {
                    producer.sendMessage(message, callback);
                    break;
                } catch (TubeClientException e) { // too many in flight: wait a little
                    Thread.sleep(1);
                }
            }
        }
        pending.await(600, java.util.concurrent.TimeUnit.SECONDS);
        long millis = (System.nanoTime() - start) / 1_000_000L;
        System.out.println("PRODUCED " + acked.get() + " " + millis);
        producer.shutdown();
        return acked.get() > 0; // the caller compares the count
    }

    private static boolean consumeTimed(MessageSessionFactory factory, String master,
            String topic, String group, int count) throws Throwable {
        long start = System.nanoTime();
        long[] first = {0};
        long[] last = {0};
        int received = pull(factory, master, topic, group, count, 600_000L, 1, null, messages -> {
            last[0] = System.nanoTime();
            if (first[0] == 0) {
                first[0] = last[0];
            }
        });
        long end = last[0] == 0 ? System.nanoTime() : last[0];
        System.out.println("CONSUMED " + received + " " + (end - start) / 1_000_000L + " "
                + (first[0] == 0 ? 0 : (end - first[0]) / 1_000_000L));
        return received >= count;
    }

    private static String orDash(String text) {
        return text == null || text.isEmpty() ? "-" : text;
    }
}
