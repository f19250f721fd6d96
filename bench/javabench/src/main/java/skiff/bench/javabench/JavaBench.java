package skiff.bench.javabench;

import java.lang.reflect.Field;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.LongAdder;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.stat.ConsumerStatsManager;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.stats.StatsItem;
import org.apache.rocketmq.common.stats.StatsItemSet;
import org.apache.rocketmq.example.benchmark.Consumer;
import org.apache.rocketmq.example.benchmark.Producer;

/**
 * Runs RocketMQ's own benchmark tool (rocketmq-example 5.5.0, unmodified) for bench/java-bench.sh:
 * its {@code main} methods are called in this JVM, with the tool's own arguments, so that the
 * run can be timed and the drain noticed.
 *
 * <pre>
 *   java -cp ... skiff.bench.javabench.JavaBench produce [--seconds S] -- PRODUCER_ARGS...
 *   java -cp ... skiff.bench.javabench.JavaBench drain --namesrv NS --topic T --group G
 *       [--timeout S] -- CONSUMER_ARGS...
 * </pre>
 *
 * <ul>
 *   <li>produce: {@code org.apache.rocketmq.example.benchmark.Producer.main(PRODUCER_ARGS)}. With
 *       {@code -q N} the tool sends N messages and returns; with {@code --seconds S} (the tool
 *       itself has no time limit) the JVM exits S seconds after the call. Prints
 *       {@code JAVABENCH SEND_MS=} (from the call to its return, or to the exit).</li>
 *   <li>drain: counts the messages stored in topic T (the sum over its queues of max offset −
 *       min offset, GET_MAX_OFFSET / GET_MIN_OFFSET, with a pull consumer of its own, until two
 *       counts agree), then calls {@code Consumer.main(CONSUMER_ARGS)} (it starts a push consumer
 *       of group G and returns) and every 5 ms reads how many messages the tool's listener has
 *       returned CONSUME_SUCCESS for: the client's own count behind its consume-OK TPS
 *       (ConsumerStatsManager, {@code T@G}). When that reaches the stored count it prints
 *       {@code JAVABENCH STORED= CONSUMED= QUEUES= DRAIN_MS=} (from the call) and exits.</li>
 * </ul>
 */
public final class JavaBench {
    private JavaBench() {}

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            usage();
        }
        int sep = -1;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--")) {
                sep = i;
                break;
            }
        }
        if (sep < 0) {
            usage();
        }
        String[] tool = java.util.Arrays.copyOfRange(args, sep + 1, args.length);
        String namesrv = null, topic = null, group = null;
        long seconds = 0, timeout = 600;
        for (int i = 1; i < sep; i += 2) {
            if (i + 1 >= sep) {
                usage();
            }
            String v = args[i + 1];
            switch (args[i]) {
                case "--seconds": seconds = Long.parseLong(v); break;
                case "--namesrv": namesrv = v; break;
                case "--topic": topic = v; break;
                case "--group": group = v; break;
                case "--timeout": timeout = Long.parseLong(v); break;
                default: usage();
            }
        }
        switch (args[0]) {
            case "produce":
                produce(seconds, tool);
                break;
            case "drain":
                if (namesrv == null || topic == null || group == null) {
                    usage();
                }
                drain(namesrv, topic, group, timeout, tool);
                break;
            default:
                usage();
        }
    }

    static void usage() {
        System.err.println("usage: JavaBench produce [--seconds S] -- PRODUCER_ARGS...\n"
            + "       JavaBench drain --namesrv NS --topic T --group G [--timeout S] -- CONSUMER_ARGS...");
        System.exit(2);
    }

    static void produce(long seconds, String[] tool) throws Exception {
        Thread main = new Thread(() -> {
            try {
                Producer.main(tool);
            } catch (Throwable e) {
                e.printStackTrace();
                System.out.flush();
                System.exit(1);
            }
        }, "benchmark-producer-main");
        long t0 = System.nanoTime();
        main.start();
        if (seconds > 0) {
            main.join(seconds * 1000L);
        } else {
            main.join();
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        System.out.printf("JAVABENCH SEND_MS=%d%n", ms);
        System.out.flush();
        System.exit(0);
    }

    static void drain(String namesrv, String topic, String group, long timeoutSecs, String[] tool)
        throws Exception {
        long[] stored = storedMessages(namesrv, topic);
        long t0 = System.nanoTime();
        Consumer.main(tool);
        long deadline = t0 + timeoutSecs * 1_000_000_000L;
        Field ok = ConsumerStatsManager.class.getDeclaredField("topicAndGroupConsumeOKTPS");
        ok.setAccessible(true);
        MQClientInstance instance = null;
        long consumed = 0;
        while (System.nanoTime() < deadline) {
            if (instance == null) {
                instance = clientOf(group);
            }
            if (instance != null) {
                StatsItemSet set = (StatsItemSet) ok.get(instance.getConsumerStatsManager());
                StatsItem item = set.getStatsItem(topic + "@" + group);
                LongAdder n = item == null ? null : item.getValue();
                consumed = n == null ? 0 : n.sum();
                if (consumed >= stored[0]) {
                    long ms = (System.nanoTime() - t0) / 1_000_000;
                    System.out.printf("JAVABENCH STORED=%d CONSUMED=%d QUEUES=%d DRAIN_MS=%d%n",
                        stored[0], consumed, stored[1], ms);
                    System.out.flush();
                    System.exit(0);
                }
            }
            Thread.sleep(5);
        }
        System.out.printf("JAVABENCH FAIL: consumed %d of %d messages in %d s%n", consumed, stored[0],
            timeoutSecs);
        System.out.flush();
        System.exit(1);
    }

    /** {messages stored in topic, its queue count}, counted until two counts 200 ms apart agree. */
    static long[] storedMessages(String namesrv, String topic) throws Exception {
        @SuppressWarnings("deprecation")
        DefaultMQPullConsumer c = new DefaultMQPullConsumer("javabench_count");
        c.setNamesrvAddr(namesrv);
        c.setInstanceName("javabench_count_" + ProcessHandle.current().pid());
        c.start();
        try {
            long last = -1;
            for (int attempt = 0; attempt < 50; attempt++) {
                Set<MessageQueue> mqs = c.fetchSubscribeMessageQueues(topic);
                long sum = 0;
                for (MessageQueue mq : mqs) {
                    sum += c.maxOffset(mq) - c.minOffset(mq);
                }
                if (sum == last) {
                    return new long[] {sum, mqs.size()};
                }
                last = sum;
                Thread.sleep(200);
            }
            throw new IllegalStateException("the stored count of " + topic + " kept changing");
        } finally {
            c.shutdown();
        }
    }

    /** The client instance (MQClientManager's factory table) that runs a consumer of group. */
    @SuppressWarnings("unchecked")
    static MQClientInstance clientOf(String group) throws Exception {
        Field f = MQClientManager.class.getDeclaredField("factoryTable");
        f.setAccessible(true);
        Map<String, MQClientInstance> table = (Map<String, MQClientInstance>) f.get(MQClientManager.getInstance());
        for (MQClientInstance i : table.values()) {
            if (i.selectConsumer(group) != null) {
                return i;
            }
        }
        return null;
    }
}
