package skiff.conformance;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.BooleanSupplier;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/** Client construction and reading helpers shared by the scenarios. */
final class Util {
    private Util() {}

    static String show(Object o) {
        String s = String.valueOf(o);
        return s.length() > 300 ? s.substring(0, 300) + "...(" + s.length() + " chars)" : s;
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String str(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static String instance() {
        return "cf" + UUID.randomUUID().toString().substring(0, 8);
    }

    static DefaultMQProducer producer(Ctx ctx) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(ctx.name("pg"), WireLog.forScenario(ctx.scenario));
        p.setNamesrvAddr(ctx.namesrv);
        p.setInstanceName(instance());
        p.setSendMsgTimeout(10_000);
        p.setRetryTimesWhenSendFailed(0);
        p.setRetryTimesWhenSendAsyncFailed(0);
        p.start();
        ctx.closeLater(p::shutdown);
        return p;
    }

    /** A push consumer with a unique instance, not started. The context shuts it down. */
    static DefaultMQPushConsumer push(Ctx ctx, String group) {
        // The (group, hook, strategy) constructor exists in 4.9.8 and 5.x alike (run.sh also builds
        // this harness against rocketmq-client 4.9.8); averaging is both versions' default.
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, WireLog.forScenario(ctx.scenario),
            new AllocateMessageQueueAveragely());
        c.setNamesrvAddr(ctx.namesrv);
        c.setInstanceName(instance());
        c.setConsumeThreadMin(2);
        c.setConsumeThreadMax(4);
        c.setPersistConsumerOffsetInterval(1000);
        c.setPollNameServerInterval(1000); // find %RETRY% routes quickly (default 30 s)
        ctx.closeLater(c::shutdown);
        return c;
    }

    /**
     * {@code setMessageModel(BROADCASTING)}: the enum moved from org.apache.rocketmq.common.protocol
     * (4.9.8) to org.apache.rocketmq.remoting.protocol (5.x), so it is looked up by reflection.
     */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static void broadcasting(DefaultMQPushConsumer c) throws Exception {
        for (java.lang.reflect.Method m : c.getClass().getMethods()) {
            if (m.getName().equals("setMessageModel") && m.getParameterCount() == 1) {
                Class<? extends Enum> type = (Class<? extends Enum>) m.getParameterTypes()[0];
                m.invoke(c, Enum.valueOf(type, "BROADCASTING"));
                return;
            }
        }
        throw new IllegalStateException("no setMessageModel");
    }

    /** Message with tag, keys and user properties. */
    static Message msg(String topic, String tag, String keys, String body, Map<String, String> props) {
        Message m = new Message(topic, tag, keys, utf8(body));
        if (props != null) {
            props.forEach(m::putUserProperty);
        }
        return m;
    }

    static Map<String, String> props(String... kv) {
        Map<String, String> m = new TreeMap<>();
        for (int i = 0; i + 1 < kv.length; i += 2) {
            m.put(kv[i], kv[i + 1]);
        }
        return m;
    }

    /** The user properties of a message: its properties minus the system ones. */
    static Map<String, String> userProps(MessageExt m) {
        Map<String, String> out = new TreeMap<>();
        for (Map.Entry<String, String> e : m.getProperties().entrySet()) {
            if (!MessageConst.STRING_HASH_SET.contains(e.getKey())) {
                out.put(e.getKey(), e.getValue());
            }
        }
        return out;
    }

    static boolean await(long timeoutMs, BooleanSupplier done) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < deadline) {
            if (done.getAsBoolean()) {
                return true;
            }
            Thread.sleep(100);
        }
        return done.getAsBoolean();
    }

    /**
     * The offsets the broker holds for {@code group} on every queue of {@code topic}, asked with
     * QUERY_CONSUMER_OFFSET (14) on the producer's connection, so no consumer joins the group. A
     * queue without a committed offset counts 0. The request header's class moved package between
     * the 4.x and 5.x clients, which share this source, hence the lookup by name.
     */
    static long committedTotal(DefaultMQProducer p, String group, String topic) throws Exception {
        MQClientInstance client = p.getDefaultMQProducerImpl().getMqClientFactory();
        Class<?> headerClass = firstClass(
            "org.apache.rocketmq.remoting.protocol.header.QueryConsumerOffsetRequestHeader",
            "org.apache.rocketmq.common.protocol.header.QueryConsumerOffsetRequestHeader");
        Method query = MQClientAPIImpl.class.getMethod("queryConsumerOffset", String.class, headerClass, long.class);
        long total = 0;
        for (MessageQueue mq : p.fetchPublishMessageQueues(topic)) {
            Object header = headerClass.getConstructor().newInstance();
            headerClass.getMethod("setConsumerGroup", String.class).invoke(header, group);
            headerClass.getMethod("setTopic", String.class).invoke(header, topic);
            headerClass.getMethod("setQueueId", Integer.class).invoke(header, mq.getQueueId());
            String addr = client.findBrokerAddressInPublish(mq.getBrokerName());
            try {
                total += (Long) query.invoke(client.getMQClientAPIImpl(), addr, header, 3000L);
            } catch (InvocationTargetException e) {
                if (!(e.getCause() instanceof MQBrokerException)) {
                    throw e;
                }
                // QUERY_NOT_FOUND: nothing committed on this queue yet
            }
        }
        return total;
    }

    /**
     * Waits until the broker's committed offsets for {@code group} on {@code topic} add up to
     * {@code total}. Scenarios about a restarted group wait for this before the restart: the
     * client's last persist at shutdown is a oneway request, which the Apache broker may apply
     * after a new consumer's first offset query on another connection, or lose on a loaded host.
     */
    static boolean awaitCommitted(DefaultMQProducer p, String group, String topic, long total, long timeoutMs)
        throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (committedTotal(p, group, topic) < total) {
            if (System.currentTimeMillis() > deadline) {
                return false;
            }
            Thread.sleep(100);
        }
        return true;
    }

    /**
     * {@code DefaultMQProducer.createTopic}: 4.x takes {@code (key, topic, queues)}, 5.x
     * {@code (key, topic, queues, attributes)}; this source compiles against both.
     */
    static void createTopic(DefaultMQProducer p, String key, String topic, int queues) throws Exception {
        for (Method m : DefaultMQProducer.class.getMethods()) {
            Class<?>[] params = m.getParameterTypes();
            if (!m.getName().equals("createTopic") || params.length < 3 || params[2] != int.class) {
                continue;
            }
            try {
                if (params.length == 3) {
                    m.invoke(p, key, topic, queues);
                    return;
                }
                if (params.length == 4 && params[3] == Map.class) {
                    m.invoke(p, key, topic, queues, new HashMap<String, String>());
                    return;
                }
            } catch (InvocationTargetException e) {
                throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
            }
        }
        throw new NoSuchMethodException("DefaultMQProducer.createTopic(key, topic, queues[, attributes])");
    }

    private static Class<?> firstClass(String... names) throws ClassNotFoundException {
        for (String name : names) {
            try {
                return Class.forName(name);
            } catch (ClassNotFoundException e) {
                // the other client generation
            }
        }
        throw new ClassNotFoundException(String.join(" or ", names));
    }

    /**
     * Reads a topic from queue offset 0 with PULL_MESSAGE (11) through a fresh pull-consumer
     * group, until at least {@code expected} messages were read or the timeout passed; sorted by
     * queue id then queue offset.
     */
    static List<MessageExt> readAll(Ctx ctx, String topic, int expected, long timeoutMs) throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(ctx.name("reader"), WireLog.forScenario(ctx.scenario));
        c.setNamesrvAddr(ctx.namesrv);
        c.setInstanceName(instance());
        c.start();
        try {
            long deadline = System.currentTimeMillis() + timeoutMs;
            Map<MessageQueue, Long> next = new HashMap<>();
            List<MessageExt> out = new ArrayList<>();
            String lastError = null;
            while (true) {
                try {
                    for (MessageQueue mq : c.fetchSubscribeMessageQueues(topic)) {
                        long off = next.getOrDefault(mq, 0L);
                        while (true) {
                            PullResult r = c.pull(mq, "*", off, 32);
                            if (r.getPullStatus() == PullStatus.FOUND) {
                                out.addAll(r.getMsgFoundList());
                                off = r.getNextBeginOffset();
                            } else if (r.getPullStatus() == PullStatus.OFFSET_ILLEGAL && r.getNextBeginOffset() > off) {
                                off = r.getNextBeginOffset();
                            } else {
                                break;
                            }
                        }
                        next.put(mq, off);
                    }
                } catch (Exception e) {
                    lastError = e.toString();
                }
                if (out.size() >= expected || System.currentTimeMillis() > deadline) {
                    break;
                }
                Thread.sleep(300);
            }
            if (out.size() < expected && lastError != null) {
                ctx.note("reader error: " + lastError);
            }
            out.sort(Comparator.comparingInt(MessageExt::getQueueId).thenComparingLong(MessageExt::getQueueOffset));
            return out;
        } finally {
            c.shutdown();
        }
    }

    static List<String> bodies(Collection<MessageExt> ms) {
        List<String> out = new ArrayList<>();
        for (MessageExt m : ms) {
            out.add(str(m.getBody()));
        }
        return out;
    }

    static <T> Set<T> setOf(Collection<T> c) {
        return new HashSet<>(c);
    }

    /** Push-consumer deliveries, in arrival order. */
    static final class Received {
        final MessageExt msg;
        final long at;
        final String who;

        Received(MessageExt msg, long at, String who) {
            this.msg = msg;
            this.at = at;
            this.who = who;
        }

        String body() {
            return str(msg.getBody());
        }
    }

    static final class Collector {
        final List<Received> all = new CopyOnWriteArrayList<>();

        void add(MessageExt m, String who) {
            all.add(new Received(m, System.currentTimeMillis(), who));
        }

        List<String> bodies() {
            List<String> out = new ArrayList<>();
            for (Received r : all) {
                out.add(r.body());
            }
            return out;
        }

        Set<String> distinct() {
            return new HashSet<>(bodies());
        }

        boolean awaitDistinct(int n, long timeoutMs) throws InterruptedException {
            return await(timeoutMs, () -> distinct().size() >= n);
        }
    }
}
