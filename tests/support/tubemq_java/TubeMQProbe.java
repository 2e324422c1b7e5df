/*
 * The official TubeMQ Java client, driven from the tests.
 *
 *   TubeMQProbe produce <master host:port> <topic>
 *       sends three fixed messages: with attributes and system headers, plain, and with
 *       attributes only; prints "SENT <partition> <message id>" per message
 *   TubeMQProbe consume <master host:port> <topic> <group> <count>
 *       reads <count> messages from the first offset; prints
 *       "GOT <hex value> <attribute string or -> <msgType or -> <msgTime or ->" per message
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
import org.apache.inlong.tubemq.client.producer.MessageSentResult;
import org.apache.inlong.tubemq.corebase.Message;

public class TubeMQProbe {

    public static void main(String[] args) throws Throwable {
        TubeClientConfig clientConfig = new TubeClientConfig(args[1]);
        MessageSessionFactory factory = new TubeSingleSessionFactory(clientConfig);
        boolean ok = "produce".equals(args[0])
                ? produce(factory, args[2])
                : consume(factory, args[1], args[2], args[3], Integer.parseInt(args[4]));
        factory.shutdown();
        System.exit(ok ? 0 : 1);
    }

    private static boolean produce(MessageSessionFactory factory, String topic) throws Throwable {
        MessageProducer producer = factory.createProducer();
        producer.publish(topic);
        Message full = new Message(topic, "java value 1".getBytes(StandardCharsets.UTF_8));
        full.setAttrKeyVal("color", "blue");
        full.setAttrKeyVal("size", "9");
        full.putSystemHeader("jtype", "202611251500");
        Message plain = new Message(topic, "java value 2".getBytes(StandardCharsets.UTF_8));
        Message attrsOnly = new Message(topic, new byte[] {0, 1, 2, (byte) 0xff});
        attrsOnly.setAttrKeyVal("only", "attrs");
        boolean ok = true;
        for (Message m : new Message[] {full, plain, attrsOnly}) {
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
            String group, int count) throws Throwable {
        ConsumerConfig config = new ConsumerConfig(master, group);
        config.setConsumePosition(ConsumePosition.CONSUMER_FROM_FIRST_OFFSET);
        PullMessageConsumer consumer = factory.createPullConsumer(config);
        consumer.subscribe(topic, null);
        consumer.completeSubscribe();
        int received = 0;
        long deadline = System.currentTimeMillis() + 90_000L;
        while (received < count && System.currentTimeMillis() < deadline) {
            if (!consumer.isPartitionsReady(1000)) {
                continue;
            }
            ConsumerResult res = consumer.getMessage();
            if (!res.isSuccess()) {
                Thread.sleep(50);
                continue;
            }
            for (Message m : res.getMessageList()) {
                received++;
                StringBuilder hex = new StringBuilder();
                for (byte b : m.getData()) {
                    hex.append(String.format("%02x", b));
                }
                System.out.println("GOT " + (hex.length() == 0 ? "-" : hex) + " "
                        + orDash(m.getAttribute()) + " " + orDash(m.getMsgType()) + " "
                        + orDash(m.getMsgTime()));
            }
            consumer.confirmConsume(res.getConfirmContext(), true);
        }
        consumer.shutdown();
        return received >= count;
    }

    private static String orDash(String text) {
        return text == null || text.isEmpty() ? "-" : text;
    }
}
