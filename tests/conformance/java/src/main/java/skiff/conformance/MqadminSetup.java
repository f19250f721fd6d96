package skiff.conformance;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The state tests/conformance/mqadmin.sh runs mqadmin against, the same on either broker:
 *
 * <pre>
 *   java -cp ... skiff.conformance.Main --mqadmin-setup --namesrv ADDR --topic T --group G --producer-group P
 * </pre>
 *
 * The topic must exist (the script creates it with mqadmin updateTopic). Sends {@link #MESSAGES}
 * messages with keys {@code mqadmin-key-<i>} and bodies {@code mqadmin-body-<i>} from producer
 * group P, consumes them all with push consumer group G (from the first offset) and waits until
 * the broker holds G's committed offsets for all of them. Then prints {@code KEY=}, {@code UNIQ_KEY=}
 * and {@code OFFSET_MSG_ID=} of the first message, {@code CONSUMED=N} and {@code READY}, and stays
 * up (producer and consumer online, for consumerConnection, consumerStatus and producerConnection)
 * until killed. On failure prints {@code SETUP FAILED: why} and exits 1.
 */
final class MqadminSetup {
    static final int MESSAGES = 20;

    private MqadminSetup() {}

    static int run(String namesrv, String topic, String group, String producerGroup) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(producerGroup);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(Util.instance());
        producer.setSendMsgTimeout(10_000);
        producer.start();
        SendResult first = null;
        for (int i = 0; i < MESSAGES; i++) {
            SendResult r = producer.send(Util.msg(topic, "mqadmin", "mqadmin-key-" + i, "mqadmin-body-" + i, null));
            if (first == null) {
                first = r;
            }
        }
        Set<String> consumed = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(Util.instance());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPersistConsumerOffsetInterval(1000);
        consumer.setPollNameServerInterval(1000);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                consumed.add(m.getMsgId());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        if (!Util.await(60_000, () -> consumed.size() >= MESSAGES)) {
            System.out.println("SETUP FAILED: consumed " + consumed.size() + "/" + MESSAGES);
            return 1;
        }
        // The broker's view of the group's offsets, read by a pull consumer of the same group
        // (its own client instance, so both can be registered).
        DefaultMQPullConsumer reader = new DefaultMQPullConsumer(group);
        reader.setNamesrvAddr(namesrv);
        reader.setInstanceName(Util.instance());
        reader.start();
        Set<MessageQueue> queues = reader.fetchSubscribeMessageQueues(topic);
        long[] committed = {0};
        boolean persisted = Util.await(30_000, () -> {
            long sum = 0;
            for (MessageQueue mq : queues) {
                try {
                    sum += Math.max(0, reader.fetchConsumeOffset(mq, true));
                } catch (Exception e) {
                    return false;
                }
            }
            committed[0] = sum;
            return sum >= MESSAGES;
        });
        reader.shutdown();
        if (!persisted) {
            System.out.println("SETUP FAILED: broker holds committed offsets for " + committed[0] + "/" + MESSAGES);
            return 1;
        }
        System.out.println("KEY=mqadmin-key-0");
        System.out.println("UNIQ_KEY=" + first.getMsgId());
        System.out.println("OFFSET_MSG_ID=" + first.getOffsetMsgId());
        System.out.println("CONSUMED=" + consumed.size());
        System.out.println("READY");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
        return 0;
    }
}
