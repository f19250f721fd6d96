package skiff.conformance;

import static skiff.conformance.Util.await;
import static skiff.conformance.Util.msg;
import static skiff.conformance.Util.producer;
import static skiff.conformance.Util.props;
import static skiff.conformance.Util.push;
import static skiff.conformance.Util.readAll;
import static skiff.conformance.Util.str;
import static skiff.conformance.Util.userProps;
import static skiff.conformance.Util.utf8;

import java.text.SimpleDateFormat;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Date;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.exception.RequestTimeoutException;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/** The scenarios. Each one is written once and must pass against Apache RocketMQ. */
final class Scenarios {
    private Scenarios() {}

    interface Body {
        void run(Ctx ctx) throws Exception;
    }

    static final class Def {
        final int timeoutSecs;
        final Body body;

        Def(int timeoutSecs, Body body) {
            this.timeoutSecs = timeoutSecs;
            this.body = body;
        }
    }

    static Map<String, Def> all() {
        Map<String, Def> m = new LinkedHashMap<>();
        m.put("send_sync", new Def(60, Scenarios::sendSync));
        m.put("stored_properties", new Def(60, Scenarios::storedProperties));
        m.put("send_async", new Def(60, Scenarios::sendAsync));
        m.put("tls_send_and_consume", new Def(90, Scenarios::tlsSendAndConsume));
        m.put("send_oneway", new Def(60, Scenarios::sendOneway));
        m.put("send_batch", new Def(60, Scenarios::sendBatch));
        m.put("body_4mib", new Def(90, Scenarios::body4MiB));
        m.put("body_compressed", new Def(60, Scenarios::bodyCompressed));
        m.put("orderly_send_selector", new Def(60, Scenarios::orderlySend));
        m.put("push_tag_filter", new Def(60, Scenarios::pushTags));
        m.put("retry_to_dlq", new Def(120, Scenarios::retryToDlq));
        m.put("retry_default_delay", new Def(90, Scenarios::retryDefaultDelay));
        m.put("from_first_offset", new Def(60, c -> fromWhere(c, ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)));
        m.put("from_last_offset", new Def(60, c -> fromWhere(c, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)));
        m.put("from_timestamp", new Def(60, c -> fromWhere(c, ConsumeFromWhere.CONSUME_FROM_TIMESTAMP)));
        m.put("restart_resumes", new Def(120, Scenarios::restartResumes));
        m.put("rebalance_two_consumers", new Def(180, Scenarios::rebalanceTwo));
        m.put("orderly_consume_suspend", new Def(90, Scenarios::orderlyConsume));
        m.put("broadcasting", new Def(100, Scenarios::broadcasting));
        m.put("delay_levels", new Def(60, Scenarios::delayLevels));
        m.put("lite_pull_subscribe", new Def(90, Scenarios::litePullSubscribe));
        m.put("lite_pull_assign_seek", new Def(60, Scenarios::litePullAssignSeek));
        m.put("pull_offset_edges", new Def(60, Scenarios::pullOffsetEdges));
        m.put("lookup_by_id_and_key", new Def(60, Scenarios::lookupByIdAndKey));
        m.put("client_create_topic", new Def(60, Scenarios::clientCreateTopic));
        m.put("missing_topic_route", new Def(60, TopicCreation::missingTopicRoute));
        m.put("missing_topic_status", new Def(60, TopicCreation::missingTopicStatus));
        m.put("missing_topic_consumer", new Def(60, TopicCreation::missingTopicConsumer));
        m.put("first_send_creates_topic", new Def(60, TopicCreation::firstSendCreatesTopic));
        m.put("transaction_commit_rollback", new Def(60, Scenarios::transactions));
        // Both brokers run with transactionTimeOut 3 s and transactionCheckInterval 2 s here
        // (tests/conformance/apache/start.sh, run.sh), so a check-back comes within seconds.
        m.put("transaction_check_back", new Def(90, Scenarios::transactionCheckBack));
        m.put("sql92_selector", new Def(90, Scenarios::sql92Selector));
        m.put("sql92_malformed_selector", new Def(60, Scenarios::sql92Malformed));
        m.put("request_reply", new Def(90, Scenarios::requestReply));
        // Timer messages exist from the 5.x client and broker on; never in the 4.9.8 core set.
        m.put("timer_delays", new Def(60, Scenarios::timerDelays));
        m.put("timer_delay_too_long", new Def(60, Scenarios::timerDelayTooLong));
        m.put("timer_recall", new Def(60, Scenarios::timerRecall));
        m.put("send_priority", new Def(60, Scenarios::sendPriority));
        // POP consumption (PopScenarios): 5.x client and broker only; pom-4.9.8.xml leaves
        // PopScenarios out, so these are reached by name (never in the 4.9.8 core set).
        m.put("pop_push_consume", new Def(90, pop("pushConsume")));
        m.put("pop_invisible_retry", new Def(90, pop("invisibleRetry")));
        m.put("pop_raw_ack_and_invisible", new Def(90, pop("rawAckAndInvisible")));
        m.put("pop_orderly", new Def(90, pop("orderly")));
        m.put("pop_notification", new Def(60, pop("notification")));
        m.put("pop_to_dlq", new Def(120, pop("toDlq")));
        return m;
    }

    /**
     * A scenario of {@code PopScenarios} by method name. That class uses the 5.x client's pop API
     * and is compiled only by pom.xml, not by pom-4.9.8.xml, so this source cannot name it.
     */
    static Body pop(String method) {
        return ctx -> {
            try {
                Class.forName("skiff.conformance.PopScenarios").getDeclaredMethod(method, Ctx.class).invoke(null, ctx);
            } catch (java.lang.reflect.InvocationTargetException e) {
                Throwable cause = e.getCause();
                throw cause instanceof Exception ? (Exception) cause : new RuntimeException(cause);
            }
        };
    }

    // ---- helpers -------------------------------------------------------------------------------

    /**
     * Compares what was sent with what a reader found, matched by body: topic, tags, keys, user
     * properties, and (with send results) queue id, queue offset, msgId and offsetMsgId.
     */
    static void verify(Ctx ctx, String topic, List<Message> sent, List<SendResult> results, List<MessageExt> got) {
        ctx.eq("number of stored messages", sent.size(), got.size());
        Map<String, MessageExt> byBody = new HashMap<>();
        for (MessageExt m : got) {
            if (byBody.put(str(m.getBody()), m) != null) {
                ctx.fail("body stored twice: " + str(m.getBody()));
            }
        }
        for (int i = 0; i < sent.size(); i++) {
            Message s = sent.get(i);
            String body = str(s.getBody());
            MessageExt g = byBody.get(body);
            if (!ctx.check(g != null, "message " + body + " not found")) {
                continue;
            }
            ctx.eq(body + " topic", topic, g.getTopic());
            ctx.eq(body + " tags", s.getTags(), g.getTags());
            ctx.eq(body + " keys", s.getKeys(), g.getKeys());
            ctx.eq(body + " user properties", userPropsOf(s), userProps(g));
            if (results != null && results.get(i) != null) {
                SendResult r = results.get(i);
                ctx.eq(body + " queue id", r.getMessageQueue().getQueueId(), g.getQueueId());
                ctx.eq(body + " queue offset", r.getQueueOffset(), g.getQueueOffset());
                ctx.eq(body + " msgId (UNIQ_KEY)", r.getMsgId(), g.getMsgId());
                if (g instanceof MessageClientExt) {
                    ctx.eq(body + " offsetMsgId", r.getOffsetMsgId(), ((MessageClientExt) g).getOffsetMsgId());
                }
            }
        }
    }

    static Map<String, String> userPropsOf(Message m) {
        Map<String, String> out = new TreeMap<>();
        m.getProperties().forEach((k, v) -> {
            if (!MessageConst.STRING_HASH_SET.contains(k)) {
                out.put(k, v);
            }
        });
        return out;
    }

    static List<Message> sample(String topic, String prefix, int n) {
        String[] tags = {"TagA", "TagB", "TagC"};
        List<Message> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(msg(topic, tags[i % 3], prefix + "-key" + i + " shared-key", prefix + "-" + i,
                props("color", i % 2 == 0 ? "red" : "blue", "seq", Integer.toString(i), "unicode", "\u00e9t\u00e9")));
        }
        return out;
    }

    /** Polls a lite pull consumer until it has `n` messages or 20 s pass; returns their offsets. */
    static List<Long> pollOffsets(DefaultLitePullConsumer c, int n) {
        List<Long> offsets = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 20_000;
        while (offsets.size() < n && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll()) {
                offsets.add(m.getQueueOffset());
            }
        }
        return offsets;
    }

    static Set<MessageQueue> assigned(DefaultMQPushConsumer c, String topic) {
        Set<MessageQueue> out = new HashSet<>();
        for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
            if (mq.getTopic().equals(topic)) {
                out.add(mq);
            }
        }
        return out;
    }

    /**
     * Waits until the consumer pulls its group's retry topic: the broker creates %RETRY%group at
     * the consumer's heartbeat and the client finds its route by polling the name server, so a
     * retry measured before that would time route discovery, not the broker's delay.
     */
    static void awaitRetryQueue(Ctx ctx, DefaultMQPushConsumer c, String group) throws InterruptedException {
        String retry = "%RETRY%" + group;
        ctx.check(await(30_000, () -> !assigned(c, retry).isEmpty()),
            "the consumer was not pulling " + retry + " 30 s after start (no route for it?)");
    }

    static String queueIds(Set<MessageQueue> mqs) {
        return mqs.stream().map(MessageQueue::getQueueId).sorted().map(String::valueOf).collect(Collectors.joining(",", "[", "]"));
    }

    // ---- sends ---------------------------------------------------------------------------------

    static void sendSync(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        List<Message> sent = sample(topic, "sync", 4);
        List<SendResult> results = new ArrayList<>();
        for (Message m : sent) {
            SendResult r = p.send(m);
            ctx.eq("send status of " + str(m.getBody()), SendStatus.SEND_OK, r.getSendStatus());
            results.add(r);
        }
        ctx.note("sent to " + results.stream().map(r -> r.getMessageQueue().getQueueId() + "@" + r.getQueueOffset()).collect(Collectors.toList()));
        verify(ctx, topic, sent, results, readAll(ctx, topic, sent.size(), 15_000));
    }

    /**
     * The property names a stored message carries when read back, beyond the user's: the
     * producer's (UNIQ_KEY, WAIT, TAGS, KEYS), the broker's stamps (MSG_REGION and TRACE_ON in
     * AbstractSendMessageProcessor.buildMsgContext, CLUSTER in SendMessageProcessor; request-reply's
     * createReplyMessage needs CLUSTER) and the client's MIN_OFFSET / MAX_OFFSET from the pull.
     */
    static void storedProperties(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        SendResult r = p.send(msg(topic, "P", "pk", "props", props("u", "1")));
        List<MessageExt> got = readAll(ctx, topic, 1, 10_000);
        if (!ctx.eq("stored", 1, got.size())) {
            return;
        }
        MessageExt g = got.get(0);
        ctx.eq("property names", new TreeSet<>(Arrays.asList("CLUSTER", "KEYS", "MAX_OFFSET", "MIN_OFFSET", "MSG_REGION",
            "TAGS", "TRACE_ON", "UNIQ_KEY", "WAIT", "u")), new TreeSet<>(g.getProperties().keySet()));
        ctx.eq("MSG_REGION (broker default regionId)", "DefaultRegion", g.getProperty(MessageConst.PROPERTY_MSG_REGION));
        ctx.eq("TRACE_ON (broker default traceOn)", "true", g.getProperty(MessageConst.PROPERTY_TRACE_SWITCH));
        ctx.eq("UNIQ_KEY", r.getMsgId(), g.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        ctx.check(g.getProperty(MessageConst.PROPERTY_CLUSTER) != null && !g.getProperty(MessageConst.PROPERTY_CLUSTER).isEmpty(),
            "no CLUSTER property on the stored message");
        ctx.eq("reconsumeTimes", 0, g.getReconsumeTimes());
        ctx.eq("sysFlag", 0, g.getSysFlag());
        ctx.eq("flag", 0, g.getFlag());
        ctx.check(g.getBornTimestamp() <= g.getStoreTimestamp(), "bornTimestamp after storeTimestamp");
        ctx.note("CLUSTER=" + g.getProperty(MessageConst.PROPERTY_CLUSTER));
    }

    static void sendAsync(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        // The first send creates the topic; async sends then go to its queues.
        List<Message> sent = sample(topic, "async", 6);
        SendResult[] results = new SendResult[sent.size()];
        Throwable[] errors = new Throwable[sent.size()];
        CountDownLatch latch = new CountDownLatch(sent.size());
        for (int i = 0; i < sent.size(); i++) {
            final int idx = i;
            p.send(sent.get(i), new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    results[idx] = r;
                    latch.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    errors[idx] = e;
                    latch.countDown();
                }
            });
        }
        ctx.check(latch.await(20, TimeUnit.SECONDS), "not every async callback ran within 20 s");
        for (int i = 0; i < sent.size(); i++) {
            ctx.check(errors[i] == null, "async send " + i + " failed: " + errors[i]);
            if (results[i] != null) {
                ctx.eq("async send status " + i, SendStatus.SEND_OK, results[i].getSendStatus());
            }
        }
        verify(ctx, topic, sent, Arrays.asList(results), readAll(ctx, topic, sent.size(), 15_000));
    }

    static void sendOneway(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        List<Message> sent = sample(topic, "oneway", 4);
        for (Message m : sent) {
            p.sendOneway(m);
        }
        verify(ctx, topic, sent, null, readAll(ctx, topic, sent.size(), 15_000));
    }

    static void sendBatch(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        List<Message> sent = sample(topic, "batch", 3);
        SendResult r = p.send(sent);
        ctx.eq("batch send status", SendStatus.SEND_OK, r.getSendStatus());
        List<String> uniq = Arrays.asList(String.valueOf(r.getMsgId()).split(","));
        List<String> offsetIds = Arrays.asList(String.valueOf(r.getOffsetMsgId()).split(","));
        ctx.note("batch result queue " + r.getMessageQueue().getQueueId() + "@" + r.getQueueOffset()
            + ", " + uniq.size() + " msgIds, " + offsetIds.size() + " offsetMsgIds");
        ctx.eq("number of msgIds in the batch send result", 3, uniq.size());
        ctx.eq("number of offsetMsgIds in the batch send result", 3, offsetIds.size());
        List<MessageExt> got = readAll(ctx, topic, sent.size(), 15_000);
        verify(ctx, topic, sent, null, got);
        // One queue, consecutive offsets from the result's, in batch order, ids as returned.
        for (int i = 0; i < got.size() && i < 3; i++) {
            MessageExt g = got.get(i);
            ctx.eq("batch message " + i + " body", "batch-" + i, str(g.getBody()));
            ctx.eq("batch message " + i + " queue", r.getMessageQueue().getQueueId(), g.getQueueId());
            ctx.eq("batch message " + i + " offset", r.getQueueOffset() + i, g.getQueueOffset());
            if (i < uniq.size()) {
                ctx.eq("batch message " + i + " msgId", uniq.get(i), g.getMsgId());
            }
            if (i < offsetIds.size() && g instanceof MessageClientExt) {
                ctx.eq("batch message " + i + " offsetMsgId", offsetIds.get(i), ((MessageClientExt) g).getOffsetMsgId());
            }
        }
    }

    static void body4MiB(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        p.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE); // send it as is
        byte[] body = new byte[4 * 1024 * 1024];
        new Random(42).nextBytes(body);
        Message m = new Message(topic, "Big", "big-key", body);
        m.putUserProperty("size", Integer.toString(body.length));
        SendResult r = p.send(m);
        ctx.eq("4 MiB send status", SendStatus.SEND_OK, r.getSendStatus());
        List<MessageExt> got = readAll(ctx, topic, 1, 20_000);
        if (ctx.eq("stored messages", 1, got.size())) {
            MessageExt g = got.get(0);
            ctx.eq("body length", body.length, g.getBody().length);
            ctx.check(Arrays.equals(body, g.getBody()), "4 MiB body differs from what was sent");
            ctx.eq("tags", "Big", g.getTags());
            ctx.eq("user property size", Integer.toString(body.length), g.getUserProperty("size"));
            ctx.eq("queue offset", r.getQueueOffset(), g.getQueueOffset());
        }
    }

    static void bodyCompressed(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx); // default: compress bodies over 4 KiB
        StringBuilder sb = new StringBuilder();
        while (sb.length() < 64 * 1024) {
            sb.append("compressible line ").append(sb.length() % 97).append('\n');
        }
        byte[] body = utf8(sb.toString());
        Message m = new Message(topic, "Zip", "zip-key", body);
        m.putUserProperty("kind", "compressed");
        SendResult r = p.send(m);
        ctx.eq("send status", SendStatus.SEND_OK, r.getSendStatus());
        List<MessageExt> got = readAll(ctx, topic, 1, 15_000);
        if (ctx.eq("stored messages", 1, got.size())) {
            MessageExt g = got.get(0);
            ctx.check(Arrays.equals(body, g.getBody()), "body after decompression differs (length "
                + g.getBody().length + " vs " + body.length + ")");
            ctx.eq("tags", "Zip", g.getTags());
            ctx.eq("user property kind", "compressed", g.getUserProperty("kind"));
            ctx.check(g.getStoreSize() < body.length / 4, "stored size " + g.getStoreSize()
                + " suggests the body was not stored compressed (" + body.length + " bytes raw)");
            ctx.note("64 KiB body stored in " + g.getStoreSize() + " bytes");
        }
    }

    static void orderlySend(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        MessageQueueSelector byKey = (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size());
        Map<Integer, List<String>> sentByKey = new TreeMap<>();
        Map<Integer, Integer> queueOfKey = new TreeMap<>();
        int queues = -1;
        for (int i = 0; i < 20; i++) {
            int key = i % 4;
            String body = "order" + key + "-" + (i / 4);
            SendResult r = p.send(msg(topic, "Ord", "order" + key, body, null), byKey, key);
            ctx.eq("send status", SendStatus.SEND_OK, r.getSendStatus());
            if (queues < 0) {
                queues = p.fetchPublishMessageQueues(topic).size();
            }
            ctx.eq("queue chosen for key " + key, key % queues, r.getMessageQueue().getQueueId());
            Integer prev = queueOfKey.put(key, r.getMessageQueue().getQueueId());
            ctx.check(prev == null || prev == r.getMessageQueue().getQueueId(), "key " + key + " changed queue");
            sentByKey.computeIfAbsent(key, k -> new ArrayList<>()).add(body);
        }
        ctx.note(queues + " write queues");
        List<MessageExt> got = readAll(ctx, topic, 20, 15_000);
        ctx.eq("stored", 20, got.size());
        Map<Integer, List<String>> storedByKey = new TreeMap<>();
        for (MessageExt g : got) { // sorted by queue then offset
            int key = Integer.parseInt(g.getKeys().substring(5));
            storedByKey.computeIfAbsent(key, k -> new ArrayList<>()).add(str(g.getBody()));
            ctx.eq("queue of " + str(g.getBody()), queueOfKey.get(key), g.getQueueId());
        }
        ctx.eq("per-key order in the queues", sentByKey, storedByKey);
    }

    // ---- push consumers ------------------------------------------------------------------------

    /**
     * The remoting protocol over TLS, as a client with useTLS (the `tls.enable` property) speaks
     * it to the name server and the broker: TLS without ALPN, the client trusting any
     * certificate (its test mode, the default). The broker serves TLS beside plaintext (Apache's
     * default tls.server.mode is permissive, as is skiff's tls_mode).
     */
    static void tlsSendAndConsume(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = new DefaultMQProducer(ctx.name("pg"), WireLog.forScenario(ctx.scenario));
        p.setNamesrvAddr(ctx.namesrv);
        p.setInstanceName(Util.instance());
        p.setUseTLS(true);
        p.setSendMsgTimeout(10_000);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        ctx.closeLater(p::shutdown);
        List<Message> sent = sample(topic, "tls", 4);
        for (Message m : sent) {
            ctx.eq("send status over TLS of " + str(m.getBody()), SendStatus.SEND_OK, p.send(m).getSendStatus());
        }
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = push(ctx, ctx.name("cg"));
        c.setUseTLS(true);
        c.subscribe(topic, "*");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
            msgs.forEach(m -> got.add(m, "c"));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        got.awaitDistinct(sent.size(), 30_000);
        Set<String> want = new TreeSet<>();
        sent.forEach(m -> want.add(str(m.getBody())));
        ctx.eq("bodies consumed over TLS", want, new TreeSet<>(got.bodies()));
    }

    static void pushTags(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        List<Message> sent = new ArrayList<>();
        for (String tag : new String[] {"TagA", "TagB", "TagC", "TagAB", "TagA"}) {
            sent.add(msg(topic, tag, null, "tags-" + sent.size() + "-" + tag, props("tag", tag)));
        }
        sent.add(new Message(topic, utf8("tags-none"))); // no tag at all
        for (Message m : sent) {
            p.send(m);
        }
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = push(ctx, ctx.name("cg"));
        c.subscribe(topic, "TagA || TagB");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
            msgs.forEach(m -> got.add(m, "c"));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        Set<String> want = new TreeSet<>(Arrays.asList("tags-0-TagA", "tags-1-TagB", "tags-4-TagA"));
        got.awaitDistinct(want.size(), 20_000);
        Thread.sleep(2000); // anything unwanted would arrive by now
        ctx.eq("bodies delivered for 'TagA || TagB'", want, new TreeSet<>(got.bodies()));
        ctx.eq("deliveries (no duplicates)", want.size(), got.all.size());
        for (Util.Received r : got.all) {
            ctx.eq("tag property of " + r.body(), r.msg.getTags(), r.msg.getUserProperty("tag"));
        }
    }

    /**
     * SQL92 selectors over user properties and TAGS: each group gets exactly the messages its
     * selector matches, with RocketMQ's rules for missing properties (null), values that do not
     * convert to the compared number (no match), BETWEEN, IN and IS NULL. The Apache broker
     * needs enablePropertyFilter=true for this; skiff always filters.
     *
     * Everything goes to one queue and each consumer runs one consume thread, so a sentinel
     * message that every selector matches, sent last, is consumed after every earlier delivery:
     * once it arrives, nothing unwanted can still be on its way.
     */
    static void sql92Selector(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        List<Message> sent = new ArrayList<>();
        sent.add(msg(topic, "TagA", null, "m0", props("a", "3", "color", "red")));
        sent.add(msg(topic, "TagA", null, "m1", props("a", "7", "color", "red")));
        sent.add(msg(topic, "TagB", null, "m2", props("a", "9", "color", "blue")));
        sent.add(msg(topic, "TagC", null, "m3", props("a", "10", "color", "red")));
        sent.add(msg(topic, "TagA", null, "m4", null));
        sent.add(msg(topic, "TagA", null, "m5", props("a", "abc", "color", "red")));
        sent.add(msg(topic, "TagB", null, "m6", props("a", "6", "color", "green")));
        sent.add(msg(topic, "TagZ", null, "end", props("sentinel", "end")));
        MessageQueueSelector first = (mqs, m, arg) -> mqs.get(0);
        for (Message m : sent) {
            p.send(m, first, null);
        }
        Map<String, Set<String>> cases = new LinkedHashMap<>();
        cases.put("a > 5 AND color = 'red'", new TreeSet<>(Arrays.asList("m1", "m3")));
        cases.put("a BETWEEN 6 AND 9 AND TAGS IN ('TagB', 'TagC')", new TreeSet<>(Arrays.asList("m2", "m6")));
        cases.put("color IS NULL OR TAGS = 'TagC'", new TreeSet<>(Arrays.asList("m3", "m4")));
        cases.put("color NOT IN ('red') AND a IS NOT NULL", new TreeSet<>(Arrays.asList("m2", "m6")));
        cases.put("a NOT BETWEEN 4 AND 9.5", new TreeSet<>(Arrays.asList("m0", "m3")));
        Map<String, Util.Collector> got = new LinkedHashMap<>();
        for (String selector : cases.keySet()) {
            Util.Collector collector = new Util.Collector();
            got.put(selector, collector);
            DefaultMQPushConsumer c = push(ctx, ctx.name("cg"));
            c.setConsumeThreadMin(1);
            c.setConsumeThreadMax(1);
            c.subscribe(topic, MessageSelector.bySql("(" + selector + ") OR sentinel = 'end'"));
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
                msgs.forEach(m -> collector.add(m, "c"));
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
        }
        for (Map.Entry<String, Set<String>> e : cases.entrySet()) {
            Util.Collector collector = got.get(e.getKey());
            ctx.check(await(60_000, () -> collector.bodies().contains("end")),
                "sentinel delivered for " + e.getKey());
            Set<String> want = new TreeSet<>(e.getValue());
            want.add("end");
            ctx.eq("bodies delivered for " + e.getKey(), want, new TreeSet<>(collector.bodies()));
            ctx.eq("deliveries for " + e.getKey() + " (no duplicates)", want.size(), collector.all.size());
        }
    }

    /**
     * A malformed SQL92 selector is refused when the consumer starts: the Java client sends
     * CHECK_CLIENT_CONFIG (46) and the broker answers SUBSCRIPTION_PARSE_FAILED (23), which
     * start() throws as an MQClientException with that response code.
     */
    static void sql92Malformed(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        p.send(msg(topic, "TagA", null, "warm", null)); // the check goes to a broker of the route
        for (String selector : new String[] {"a > ", "a = 'open", "a IN (1, 2)", "a BETWEEN 5 AND 1", "a == 1"}) {
            DefaultMQPushConsumer c = push(ctx, ctx.name("cg"));
            c.subscribe(topic, MessageSelector.bySql(selector));
            c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) ->
                ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
            try {
                c.start();
                ctx.fail("start() accepted the selector " + selector);
            } catch (MQClientException e) {
                ctx.note("selector " + selector + " refused: " + e.getErrorMessage());
                ctx.eq("response code for " + selector, 23, e.getResponseCode());
                ctx.check(e.getErrorMessage() != null && !e.getErrorMessage().isEmpty(),
                    "refusal of " + selector + " says why");
            } finally {
                c.shutdown();
            }
        }
    }

    static void retryToDlq(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        DefaultMQProducer p = producer(ctx);
        p.send(msg(topic, "Warm", null, "warm", null)); // creates the topic
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = push(ctx, group);
        c.subscribe(topic, "*");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setMaxReconsumeTimes(2);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
            if (str(msgs.get(0).getBody()).equals("warm")) {
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
            msgs.forEach(x -> got.add(x, "c"));
            cc.setDelayLevelWhenNextConsume(1); // 1 s instead of the default 10 s, 30 s
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        c.start();
        awaitRetryQueue(ctx, c, group);
        SendResult sr = p.send(msg(topic, "Fail", "retry-key", "retry-body", props("attempt", "any")));
        await(40_000, () -> got.all.size() >= 3);
        List<MessageExt> dlq = readAll(ctx, "%DLQ%" + group, 1, 30_000);
        Thread.sleep(2500); // a fourth delivery would come ~1 s after the third
        List<Integer> times = got.all.stream().map(r -> r.msg.getReconsumeTimes()).collect(Collectors.toList());
        ctx.eq("reconsumeTimes of the deliveries", Arrays.asList(0, 1, 2), times);
        for (int i = 0; i < got.all.size(); i++) {
            Util.Received r = got.all.get(i);
            ctx.eq("delivery " + i + " topic", topic, r.msg.getTopic());
            ctx.eq("delivery " + i + " body", "retry-body", r.body());
            ctx.eq("delivery " + i + " tags", "Fail", r.msg.getTags());
            ctx.eq("delivery " + i + " keys", "retry-key", r.msg.getKeys());
            ctx.eq("delivery " + i + " user properties", props("attempt", "any"), userProps(r.msg));
            ctx.eq("delivery " + i + " msgId", sr.getMsgId(), r.msg.getMsgId());
            if (i > 0) {
                long gap = r.at - got.all.get(i - 1).at;
                ctx.check(gap >= 700, "delivery " + i + " came " + gap + " ms after the previous one (delay level 1 = 1 s)");
            }
        }
        if (ctx.eq("messages in %DLQ%" + group, 1, dlq.size())) {
            MessageExt d = dlq.get(0);
            ctx.eq("DLQ topic", "%DLQ%" + group, d.getTopic());
            ctx.eq("DLQ body", "retry-body", str(d.getBody()));
            ctx.eq("DLQ tags", "Fail", d.getTags());
            ctx.eq("DLQ keys", "retry-key", d.getKeys());
            ctx.eq("DLQ user properties", props("attempt", "any"), userProps(d));
            ctx.eq("DLQ RETRY_TOPIC property", topic, d.getProperty(MessageConst.PROPERTY_RETRY_TOPIC));
            ctx.eq("DLQ msgId (UNIQ_KEY kept)", sr.getMsgId(), d.getMsgId());
            ctx.eq("DLQ reconsumeTimes", 3, d.getReconsumeTimes());
            // The broker sets it at the first send-back from the stored message's offset msgId.
            ctx.eq("DLQ ORIGIN_MESSAGE_ID property (the original's offsetMsgId)", sr.getOffsetMsgId(),
                d.getProperty(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID));
        }
        ctx.note("deliveries " + times);
    }

    static void retryDefaultDelay(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        DefaultMQProducer p = producer(ctx);
        p.send(msg(topic, "Warm", null, "warm", null)); // creates the topic
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = push(ctx, group);
        c.subscribe(topic, "*");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
            if (str(msgs.get(0).getBody()).equals("warm")) {
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
            msgs.forEach(x -> got.add(x, "c"));
            return got.all.size() == 1 ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        awaitRetryQueue(ctx, c, group);
        p.send(msg(topic, "Once", "once-key", "fail-once", props("p", "1")));
        await(40_000, () -> got.all.size() >= 2);
        Thread.sleep(1500);
        if (ctx.eq("deliveries", 2, got.all.size())) {
            long gap = got.all.get(1).at - got.all.get(0).at;
            ctx.note("redelivered after " + gap + " ms");
            // No delay level from the client: the broker uses 3 + reconsumeTimes = level 3 = 10 s.
            ctx.check(gap >= 9_000 && gap <= 25_000, "redelivery after " + gap + " ms, expected about 10 s (level 3)");
            ctx.eq("reconsumeTimes of the redelivery", 1, got.all.get(1).msg.getReconsumeTimes());
            ctx.eq("redelivery topic", topic, got.all.get(1).msg.getTopic());
            ctx.eq("redelivery body", "fail-once", got.all.get(1).body());
            ctx.eq("redelivery tags", "Once", got.all.get(1).msg.getTags());
            ctx.eq("redelivery user properties", props("p", "1"), userProps(got.all.get(1).msg));
        }
    }

    /**
     * A new group on a topic that already has messages, then more messages. The broker answers
     * QUERY_CONSUMER_OFFSET for an unknown group with 0 while offset 0 is still in memory
     * (ConsumerManageProcessor.queryConsumerOffset), so on a young queue every policy starts at
     * 0; what differs is only how the client gets there.
     */
    static void fromWhere(Ctx ctx, ConsumeFromWhere where) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        for (int i = 0; i < 4; i++) {
            p.send(msg(topic, "Pre", null, "pre-" + i, null));
        }
        Thread.sleep(2100);
        long marker = System.currentTimeMillis();
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = push(ctx, ctx.name("cg"));
        c.subscribe(topic, "*");
        c.setConsumeFromWhere(where);
        c.setConsumeTimestamp(new SimpleDateFormat("yyyyMMddHHmmss").format(new Date(marker)));
        c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
            msgs.forEach(x -> got.add(x, "c"));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        await(15_000, () -> assigned(c, topic).size() > 0);
        Thread.sleep(1500);
        for (int i = 0; i < 2; i++) {
            p.send(msg(topic, "Post", null, "post-" + i, null));
        }
        got.awaitDistinct(6, 15_000);
        Thread.sleep(1500);
        Set<String> want = new TreeSet<>(Arrays.asList("pre-0", "pre-1", "pre-2", "pre-3", "post-0", "post-1"));
        ctx.eq(where + ": bodies delivered to a new group", want, new TreeSet<>(got.bodies()));
        ctx.eq("deliveries (no duplicates)", want.size(), got.all.size());
    }

    static void restartResumes(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        DefaultMQProducer p = producer(ctx);
        for (int i = 0; i < 10; i++) {
            p.send(msg(topic, "R", null, "first-" + i, null));
        }
        Util.Collector one = new Util.Collector();
        DefaultMQPushConsumer c1 = push(ctx, group);
        c1.subscribe(topic, "*");
        c1.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c1.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
            msgs.forEach(x -> one.add(x, "c1"));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c1.start();
        ctx.check(one.awaitDistinct(10, 20_000), "first consumer got " + one.distinct().size() + "/10");
        Thread.sleep(1500);
        // The broker holds the group's offsets before the restart (the client persists them
        // every 5 s; its last persist at shutdown is oneway and may be lost on a loaded host).
        ctx.check(Util.awaitCommitted(p, group, topic, 10, 15_000),
            "offsets committed by the first consumer: " + Util.committedTotal(p, group, topic) + "/10");
        c1.shutdown();
        for (int i = 0; i < 5; i++) {
            p.send(msg(topic, "R", null, "second-" + i, null));
        }
        Util.Collector two = new Util.Collector();
        DefaultMQPushConsumer c2 = push(ctx, group);
        c2.subscribe(topic, "*");
        c2.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c2.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
            msgs.forEach(x -> two.add(x, "c2"));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c2.start();
        // A rebalance can take the push consumer's 20 s interval to hand the queues over; on a
        // loaded host the Apache broker once took longer (nothing within 20 s), so wait longer.
        two.awaitDistinct(5, 45_000);
        Thread.sleep(3000);
        Set<String> want = new TreeSet<>();
        for (int i = 0; i < 5; i++) {
            want.add("second-" + i);
        }
        ctx.eq("first run deliveries", 10, one.all.size());
        ctx.eq("bodies delivered after the restart", want, new TreeSet<>(two.bodies()));
        ctx.eq("deliveries after the restart", 5, two.all.size());
    }

    static void rebalanceTwo(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        DefaultMQProducer p = producer(ctx);
        p.send(msg(topic, "RB", null, "warm-0", null)); // creates the topic
        int nq = p.fetchPublishMessageQueues(topic).size();
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer a = push(ctx, group);
        DefaultMQPushConsumer b = push(ctx, group);
        for (DefaultMQPushConsumer c : new DefaultMQPushConsumer[] {a, b}) {
            String who = c == a ? "A" : "B";
            c.subscribe(topic, "*");
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
                msgs.forEach(x -> got.add(x, who));
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        a.start();
        b.start();
        boolean split = await(45_000, () -> {
            Set<MessageQueue> qa = assigned(a, topic);
            Set<MessageQueue> qb = assigned(b, topic);
            Set<MessageQueue> both = new HashSet<>(qa);
            both.retainAll(qb);
            return !qa.isEmpty() && !qb.isEmpty() && both.isEmpty() && qa.size() + qb.size() == nq;
        });
        Set<MessageQueue> qa = assigned(a, topic);
        Set<MessageQueue> qb = assigned(b, topic);
        ctx.note(nq + " queues; A " + queueIds(qa) + ", B " + queueIds(qb));
        ctx.check(split, "queues not split between A and B within 45 s: A " + queueIds(qa) + ", B " + queueIds(qb));
        for (int i = 0; i < 4 * nq; i++) {
            p.send(msg(topic, "RB", null, "phase1-" + i, null));
        }
        // A consumer's first pull of a newly assigned queue can wait out a busy Apache broker's
        // long poll; the count is checked below either way.
        got.awaitDistinct(1 + 4 * nq, 45_000);
        Thread.sleep(1500);
        Map<String, String> phase1Owner = new HashMap<>();
        for (Util.Received r : got.all) {
            if (r.body().equals("warm-0")) {
                // Sent before the consumers start: the first to start may take every queue and
                // consume it before the second registers (seen with the 4.9.8 client on Apache),
                // and a rebalance may hand its queue on before the offset is committed
                // (at-least-once). Only its arrival is checked.
                phase1Owner.put(r.body(), r.who);
                continue;
            }
            MessageQueue mq = new MessageQueue(topic, r.msg.getBrokerName(), r.msg.getQueueId());
            String owner = qa.contains(mq) ? "A" : qb.contains(mq) ? "B" : "?";
            ctx.eq("consumer of " + r.body() + " (queue " + r.msg.getQueueId() + ")", owner, r.who);
            if (phase1Owner.put(r.body(), r.who) != null) {
                ctx.fail(r.body() + " delivered twice in phase 1");
            }
        }
        ctx.eq("phase 1 distinct", 1 + 4 * nq, phase1Owner.size());
        int before = got.all.size();
        b.shutdown();
        boolean all = await(45_000, () -> assigned(a, topic).size() == nq);
        ctx.check(all, "A did not take all " + nq + " queues within 45 s after B shut down: " + queueIds(assigned(a, topic)));
        for (int i = 0; i < 4 * nq; i++) {
            p.send(msg(topic, "RB", null, "phase2-" + i, null));
        }
        await(20_000, () -> got.all.stream().filter(r -> r.body().startsWith("phase2-")).map(Util.Received::body).distinct().count() >= 4L * nq);
        Thread.sleep(2000);
        List<Util.Received> later = new ArrayList<>(got.all.subList(before, got.all.size()));
        Set<String> p2 = new TreeSet<>();
        for (Util.Received r : later) {
            ctx.eq("consumer of " + r.body() + " after B left", "A", r.who);
            if (!r.body().startsWith("phase2-")) {
                ctx.fail(r.body() + " (" + phase1Owner.get(r.body()) + " had it) delivered again after B left");
            } else if (!p2.add(r.body())) {
                ctx.fail(r.body() + " delivered twice");
            }
        }
        ctx.eq("phase 2 messages received by A", 4 * nq, p2.size());
    }

    static void orderlyConsume(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        MessageQueueSelector byKey = (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size());
        for (int i = 0; i < 24; i++) {
            int key = i % 4;
            p.send(msg(topic, "Ord", "k" + key, "k" + key + "-" + (i / 4), null), byKey, key);
        }
        String suspendBody = "k1-2";
        Map<Integer, List<String>> perQueue = new ConcurrentHashMap<>();
        List<Integer> suspendedTimes = Collections.synchronizedList(new ArrayList<>());
        Set<String> suspendedOnce = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = push(ctx, ctx.name("cg"));
        c.subscribe(topic, "*");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.registerMessageListener((MessageListenerOrderly) (msgs, oc) -> {
            for (MessageExt m : msgs) {
                String body = str(m.getBody());
                perQueue.computeIfAbsent(m.getQueueId(), q -> Collections.synchronizedList(new ArrayList<>())).add(body);
                if (body.equals(suspendBody)) {
                    suspendedTimes.add(m.getReconsumeTimes());
                    if (suspendedOnce.add(body)) {
                        oc.setSuspendCurrentQueueTimeMillis(500);
                        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                    }
                }
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        await(40_000, () -> perQueue.values().stream().mapToInt(List::size).sum() >= 25);
        Thread.sleep(1500);
        Map<Integer, List<String>> expected = new TreeMap<>();
        for (int key = 0; key < 4; key++) {
            List<String> l = new ArrayList<>();
            for (int j = 0; j < 6; j++) {
                l.add("k" + key + "-" + j);
                if (("k" + key + "-" + j).equals(suspendBody)) {
                    l.add(suspendBody); // retried in place before the next one
                }
            }
            expected.put(key, l);
        }
        // Queue id = key % number of queues; with 4 or more queues each key has its own.
        Map<Integer, List<String>> observed = new TreeMap<>();
        perQueue.forEach((q, l) -> {
            synchronized (l) {
                observed.put(Integer.parseInt(l.get(0).substring(1, 2)), new ArrayList<>(l));
            }
        });
        ctx.eq("per-queue delivery order", expected, observed);
        ctx.eq("reconsumeTimes of " + suspendBody + " (first, in-place retry)", Arrays.asList(0, 1), suspendedTimes);
    }

    static void broadcasting(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        DefaultMQProducer p = producer(ctx);
        p.send(msg(topic, "BC", null, "bc-warm", null));
        Util.Collector got = new Util.Collector();
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        for (String who : new String[] {"A", "B"}) {
            DefaultMQPushConsumer c = push(ctx, group);
            Util.broadcasting(c);
            c.subscribe(topic, "*");
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
                msgs.forEach(x -> got.add(x, who));
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            cs.add(c);
        }
        int nq = p.fetchPublishMessageQueues(topic).size();
        // A consumer that misses the route at start takes its queues at the next rebalance
        // (every 20 s in the client), which a loaded host can push past the first one.
        boolean allAssigned = await(45_000, () -> cs.stream().allMatch(c -> assigned(c, topic).size() == nq));
        ctx.check(allAssigned, "every broadcasting consumer holds all " + nq + " queues within 45 s: A "
            + queueIds(assigned(cs.get(0), topic)) + ", B " + queueIds(assigned(cs.get(1), topic)));
        for (int i = 0; i < 10; i++) {
            p.send(msg(topic, "BC", null, "bc-" + i, null));
        }
        Set<String> want = new TreeSet<>();
        want.add("bc-warm");
        for (int i = 0; i < 10; i++) {
            want.add("bc-" + i);
        }
        await(20_000, () -> got.all.size() >= 2 * want.size());
        Thread.sleep(1500);
        for (String who : new String[] {"A", "B"}) {
            List<String> mine = got.all.stream().filter(r -> r.who.equals(who)).map(Util.Received::body).collect(Collectors.toList());
            ctx.eq("bodies consumer " + who + " received", want, new TreeSet<>(mine));
            ctx.eq("deliveries to consumer " + who, want.size(), mine.size());
        }
    }

    /** A started push consumer of {@code topic}, from its first offset, collecting into {@code got} as "c". */
    static DefaultMQPushConsumer collecting(Ctx ctx, String topic, Util.Collector got) throws Exception {
        DefaultMQPushConsumer c = push(ctx, ctx.name("cg"));
        c.subscribe(topic, "*");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
            msgs.forEach(x -> got.add(x, "c"));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        return c;
    }

    static void delayLevels(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        p.send(msg(topic, "Now", null, "now", null));
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = collecting(ctx, topic, got);
        ctx.check(got.awaitDistinct(1, 15_000), "undelayed message not consumed");
        Map<String, Long> sentAt = new HashMap<>();
        Map<String, Integer> level = new LinkedHashMap<>();
        level.put("delay-5s", 2);
        level.put("delay-1s", 1);
        for (Map.Entry<String, Integer> e : level.entrySet()) {
            Message m = msg(topic, "Delayed", "dk", e.getKey(), props("level", e.getValue().toString()));
            m.setDelayTimeLevel(e.getValue());
            sentAt.put(e.getKey(), System.currentTimeMillis());
            ctx.eq("send status", SendStatus.SEND_OK, p.send(m).getSendStatus());
        }
        got.awaitDistinct(3, 25_000);
        Thread.sleep(1000);
        Map<String, Long> delay = new TreeMap<>();
        for (Util.Received r : got.all) {
            if (sentAt.containsKey(r.body())) {
                delay.put(r.body(), r.at - sentAt.get(r.body()));
                ctx.eq(r.body() + " topic", topic, r.msg.getTopic());
                ctx.eq(r.body() + " tags", "Delayed", r.msg.getTags());
                ctx.eq(r.body() + " user properties", props("level", level.get(r.body()).toString()), userProps(r.msg));
            }
        }
        ctx.note("observed delays " + delay + " ms");
        ctx.eq("deliveries", 3, got.all.size());
        Long d1 = delay.get("delay-1s");
        Long d5 = delay.get("delay-5s");
        ctx.check(d1 != null && d1 >= 800 && d1 <= 6_000, "level 1 (1 s) delivered after " + d1 + " ms");
        ctx.check(d5 != null && d5 >= 4_500 && d5 <= 12_000, "level 2 (5 s) delivered after " + d5 + " ms");
    }

    // ---- timer messages (RocketMQ 5) ------------------------------------------------------------

    /** The timer properties' names: MessageConst has them from 5.x on only. */
    static final String TIMER_DELAY_SEC = "TIMER_DELAY_SEC";
    static final String TIMER_DELAY_MS = "TIMER_DELAY_MS";
    static final String TIMER_DELIVER_MS = "TIMER_DELIVER_MS";
    /** The broker rounds deliver times down to its timerPrecisionMs (1 s by default). */
    static final long TIMER_PRECISION_MS = 1000;

    /**
     * Sets a timer property through the 5.x client's own setter ({@code setDelayTimeSec},
     * {@code setDelayTimeMs}, {@code setDeliverTimeMs}) when the client has it, else writes the
     * property directly, so these sources also compile against rocketmq-client 4.9.8.
     */
    static void setTimer(Message m, String setter, String property, long value) throws Exception {
        try {
            Message.class.getMethod(setter, long.class).invoke(m, value);
        } catch (NoSuchMethodException e) {
            org.apache.rocketmq.common.message.MessageAccessor.putProperty(m, property, Long.toString(value));
        }
    }

    /**
     * Timer messages at several delays (1 s and 3 s relative, an absolute time 5 s ahead, a past
     * time): each reaches the consumer not before its time (less the broker's rounding down to
     * the second) and within a few seconds of it, with its message id, tags and user properties.
     */
    static void timerDelays(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        p.send(msg(topic, "Now", null, "now", null));
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = collecting(ctx, topic, got);
        ctx.check(got.awaitDistinct(1, 15_000), "plain message not consumed");

        Map<String, Long> dueAt = new LinkedHashMap<>();
        Map<String, String> msgIds = new HashMap<>();
        String[] names = {"delay-ms-1s", "delay-sec-3s", "deliver-at-5s", "deliver-in-past"};
        for (String name : names) {
            Message m = msg(topic, "Timed", "tk-" + name, name, props("timer", name));
            long now = System.currentTimeMillis();
            switch (name) {
                case "delay-ms-1s":
                    setTimer(m, "setDelayTimeMs", TIMER_DELAY_MS, 1000);
                    dueAt.put(name, now + 1000);
                    break;
                case "delay-sec-3s":
                    setTimer(m, "setDelayTimeSec", TIMER_DELAY_SEC, 3);
                    dueAt.put(name, now + 3000);
                    break;
                case "deliver-at-5s":
                    setTimer(m, "setDeliverTimeMs", TIMER_DELIVER_MS, now + 5000);
                    dueAt.put(name, now + 5000);
                    break;
                default:
                    setTimer(m, "setDeliverTimeMs", TIMER_DELIVER_MS, now - 60_000);
                    dueAt.put(name, now);
                    break;
            }
            SendResult r = p.send(m);
            ctx.eq(name + " send status", SendStatus.SEND_OK, r.getSendStatus());
            msgIds.put(name, r.getMsgId());
        }
        ctx.check(got.awaitDistinct(1 + names.length, 25_000), "not every timer message arrived");
        // Anything delivered twice would show up within this second.
        Thread.sleep(1000);
        Map<String, Long> lateness = new TreeMap<>();
        for (Util.Received r : got.all) {
            String name = r.body();
            if (!dueAt.containsKey(name)) {
                continue;
            }
            long late = r.at - dueAt.get(name);
            lateness.put(name, late);
            ctx.check(late >= -TIMER_PRECISION_MS,
                name + " arrived " + (-late) + " ms before its time (more than the rounding)");
            ctx.check(late <= 4_000, name + " arrived " + late + " ms after its time");
            ctx.eq(name + " topic", topic, r.msg.getTopic());
            ctx.eq(name + " tags", "Timed", r.msg.getTags());
            ctx.eq(name + " keys", "tk-" + name, r.msg.getKeys());
            ctx.eq(name + " msgId", msgIds.get(name), r.msg.getMsgId());
            ctx.eq(name + " user properties", props("timer", name), userProps(r.msg));
            // What the broker leaves on a message that waited as a timer (Apache keeps REAL_*);
            // one whose time had passed was stored as sent.
            boolean waited = !name.equals("deliver-in-past");
            ctx.eq(name + " REAL_TOPIC", waited ? topic : null, r.msg.getProperty("REAL_TOPIC"));
            for (String p2 : new String[] {"TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS"}) {
                ctx.eq(name + " has " + p2, waited, r.msg.getProperty(p2) != null);
            }
        }
        ctx.note("lateness " + lateness + " ms");
        for (Util.Received r : got.all) {
            if (r.body().equals("delay-sec-3s")) {
                ctx.note("property names on a delivered timer message " + new TreeSet<>(r.msg.getProperties().keySet()));
            }
        }
        ctx.eq("deliveries", 1 + names.length, got.all.size());
        List<String> order = new ArrayList<>();
        for (Util.Received r : got.all) {
            if (!r.body().equals("now") && !r.body().equals("deliver-in-past")) {
                order.add(r.body());
            }
        }
        ctx.eq("order of the future ones", Arrays.asList("delay-ms-1s", "delay-sec-3s", "deliver-at-5s"), order);
    }

    /**
     * Recall (5.3.2, RECALL_MESSAGE 370): two timers due ~4 s ahead each answer a recall handle;
     * the first, recalled before its time, answers its msgId and never arrives while the second
     * does; recalling the second after its time is refused with ILLEGAL_OPERATION (604), a
     * forged handle likewise. The client's recall API is reached by reflection: the 4.9.8 build
     * of this harness has none (this scenario is not in its core set).
     */
    static void timerRecall(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        p.send(msg(topic, "Now", null, "now", null));
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = collecting(ctx, topic, got);
        ctx.check(got.awaitDistinct(1, 15_000), "plain message not consumed");
        long due = System.currentTimeMillis() + 4000;
        Map<String, SendResult> sent = new LinkedHashMap<>();
        for (String name : new String[] {"recalled", "kept"}) {
            Message m = msg(topic, "Timed", null, name, null);
            setTimer(m, "setDeliverTimeMs", TIMER_DELIVER_MS, due);
            sent.put(name, p.send(m));
        }
        java.lang.reflect.Method handleOf = SendResult.class.getMethod("getRecallHandle");
        java.lang.reflect.Method recall = DefaultMQProducer.class.getMethod("recallMessage", String.class, String.class);
        String handle = (String) handleOf.invoke(sent.get("recalled"));
        if (!ctx.check(handle != null && !handle.isEmpty(), "a timer send answers a recall handle: " + handle)) {
            return;
        }
        ctx.eq("recalled msgId", sent.get("recalled").getMsgId(), recall.invoke(p, topic, handle));
        ctx.check(got.awaitDistinct(2, 20_000), "the kept timer did not arrive");
        // The recalled one would have come with the kept one; give it two seconds more.
        Thread.sleep(2000);
        List<String> bodies = new ArrayList<>();
        for (Util.Received r : got.all) {
            bodies.add(r.body());
        }
        ctx.eq("received", Arrays.asList("now", "kept"), bodies);
        // The client reads a handle itself (a broken one never leaves it): a well-formed one
        // naming another topic than the request's is the broker's to refuse.
        String keptHandle = (String) handleOf.invoke(sent.get("kept"));
        String[] parts = new String(java.util.Base64.getUrlDecoder().decode(keptHandle),
            java.nio.charset.StandardCharsets.UTF_8).split(" ");
        parts[1] = topic + "-other";
        long ahead = System.currentTimeMillis() + 60_000;
        parts[3] = Long.toString(ahead);
        String otherTopic = java.util.Base64.getUrlEncoder().encodeToString(
            String.join(" ", parts).getBytes(java.nio.charset.StandardCharsets.UTF_8));
        for (String[] late : new String[][] {{"late", keptHandle}, {"other topic's", otherTopic}}) {
            try {
                recall.invoke(p, topic, late[1]);
                ctx.fail(late[0] + " recall succeeded");
            } catch (java.lang.reflect.InvocationTargetException e) {
                if (e.getCause() instanceof org.apache.rocketmq.client.exception.MQBrokerException) {
                    org.apache.rocketmq.client.exception.MQBrokerException b =
                        (org.apache.rocketmq.client.exception.MQBrokerException) e.getCause();
                    ctx.eq(late[0] + " recall: response code", 604, b.getResponseCode());
                    ctx.note(late[0] + " recall remark: " + b.getErrorMessage());
                } else {
                    ctx.fail(late[0] + " recall failed otherwise: " + e.getCause());
                }
            }
        }
    }

    /**
     * Priority over remoting (the broker's rule since RocketMQ 5.4): a single send carrying
     * _SYS_MSG_PRIORITY_ is stored in queue min(priority, writeQueues - 1), whatever queue the
     * producer picked, and keeps the property; a grouped message (a sharding key) keeps its queue
     * and loses the property. The 4.9.8 client has no setPriority: the property is set directly.
     */
    static void sendPriority(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        // Creates the topic with the producer's four queues.
        String broker = p.send(msg(topic, "Now", null, "now", null)).getMessageQueue().getBrokerName();
        MessageQueue first = new MessageQueue(topic, broker, 0);
        String[][] sends = {{"p2", "2", null}, {"p9", "9", null}, {"grouped", "1", "g-1"}};
        Map<String, String> queues = new TreeMap<>();
        for (String[] s : sends) {
            Message m = msg(topic, "Prio", null, s[0], null);
            org.apache.rocketmq.common.message.MessageAccessor.putProperty(m, "_SYS_MSG_PRIORITY_", s[1]);
            if (s[2] != null) {
                org.apache.rocketmq.common.message.MessageAccessor.putProperty(m, "__SHARDINGKEY", s[2]);
            }
            queues.put(s[0], "queue " + p.send(m, first).getMessageQueue().getQueueId());
        }
        ctx.eq("queues the sends report", Map.of("p2", "queue 2", "p9", "queue 3", "grouped", "queue 0"), queues);
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = collecting(ctx, topic, got);
        if (!ctx.check(got.awaitDistinct(4, 20_000), "not every message consumed: " + got.bodies())) {
            return;
        }
        Map<String, String> stored = new TreeMap<>();
        for (Util.Received r : got.all) {
            if (!r.body().equals("now")) {
                stored.put(r.body(), "queue " + r.msg.getQueueId() + " priority "
                    + r.msg.getProperty("_SYS_MSG_PRIORITY_"));
            }
        }
        ctx.eq("stored queue and priority", Map.of("p2", "queue 2 priority 2", "p9", "queue 3 priority 9",
            "grouped", "queue 0 priority null"), stored);
    }

    /** A delay beyond the broker's 3-day maximum is refused with MESSAGE_ILLEGAL (13). */
    static void timerDelayTooLong(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        p.send(msg(topic, "Now", null, "now", null));
        Message m = msg(topic, "Timed", null, "too-far", null);
        setTimer(m, "setDelayTimeSec", TIMER_DELAY_SEC, 4L * 24 * 3600);
        try {
            SendResult r = p.send(m);
            ctx.fail("a 4-day delay was accepted: " + r);
        } catch (org.apache.rocketmq.client.exception.MQBrokerException e) {
            ctx.eq("response code", 13, e.getResponseCode());
            ctx.check(e.getErrorMessage() != null && e.getErrorMessage().contains("max delay"),
                "remark names the max delay: " + e.getErrorMessage());
            ctx.note("remark: " + e.getErrorMessage());
        }
        // A delay within the maximum (3 days, less a minute) is accepted.
        Message ok = msg(topic, "Timed", null, "far", null);
        setTimer(ok, "setDelayTimeSec", TIMER_DELAY_SEC, 3L * 24 * 3600 - 60);
        ctx.eq("3-day delay send status", SendStatus.SEND_OK, p.send(ok).getSendStatus());
    }

    // ---- offsets, lookup, transactions -----------------------------------------------------------

    static DefaultMQPullConsumer pullConsumer(Ctx ctx) throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(ctx.name("pc"), WireLog.forScenario(ctx.scenario));
        c.setNamesrvAddr(ctx.namesrv);
        c.setInstanceName(Util.instance());
        c.start();
        ctx.closeLater(c::shutdown);
        return c;
    }

    /** Five messages in one queue, then the queue's edges through the admin/pull requests. */
    static void pullOffsetEdges(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        MessageQueueSelector first = (mqs, msg, arg) -> mqs.get(0);
        int queueId = -1;
        for (int i = 0; i < 5; i++) {
            queueId = p.send(msg(topic, "E", "edge-key-" + i, "edge-" + i, null), first, null).getMessageQueue().getQueueId();
            Thread.sleep(30); // distinct store timestamps
        }
        DefaultMQPullConsumer c = pullConsumer(ctx);
        MessageQueue mq = null;
        for (MessageQueue q : c.fetchSubscribeMessageQueues(topic)) {
            if (q.getQueueId() == queueId) {
                mq = q;
            }
        }
        if (!ctx.check(mq != null, "no subscribe queue " + queueId)) {
            return;
        }
        List<MessageExt> all = readAll(ctx, topic, 5, 10_000);
        ctx.eq("messages", 5, all.size());
        ctx.eq("min offset (31)", 0L, c.minOffset(mq));
        ctx.eq("max offset (30)", 5L, c.maxOffset(mq));
        PullResult mid = c.pull(mq, "*", 2, 2);
        ctx.eq("pull at 2, max 2: status", PullStatus.FOUND, mid.getPullStatus());
        ctx.eq("pull at 2, max 2: offsets", Arrays.asList(2L, 3L),
            mid.getMsgFoundList() == null ? null : mid.getMsgFoundList().stream().map(MessageExt::getQueueOffset).collect(Collectors.toList()));
        ctx.eq("pull at 2, max 2: nextBeginOffset", 4L, mid.getNextBeginOffset());
        ctx.eq("pull at 2: minOffset", 0L, mid.getMinOffset());
        ctx.eq("pull at 2: maxOffset", 5L, mid.getMaxOffset());
        PullResult atMax = c.pull(mq, "*", 5, 32);
        ctx.eq("pull at max: status", PullStatus.NO_NEW_MSG, atMax.getPullStatus());
        ctx.eq("pull at max: nextBeginOffset", 5L, atMax.getNextBeginOffset());
        PullResult beyond = c.pull(mq, "*", 8, 32);
        ctx.eq("pull beyond max: status", PullStatus.OFFSET_ILLEGAL, beyond.getPullStatus());
        ctx.eq("pull beyond max: nextBeginOffset", 5L, beyond.getNextBeginOffset());
        PullResult filtered = c.pull(mq, "NoSuchTag", 0, 32);
        ctx.eq("pull from 0 with a tag no message has: status", PullStatus.NO_MATCHED_MSG, filtered.getPullStatus());
        ctx.eq("pull from 0 with a tag no message has: nextBeginOffset", 5L, filtered.getNextBeginOffset());
        ctx.check(filtered.getMsgFoundList() == null || filtered.getMsgFoundList().isEmpty(),
            "pull with tag NoSuchTag returned messages");
        if (all.size() == 5) {
            ctx.eq("searchOffset (29) at the 4th message's store time", 3L, c.searchOffset(mq, all.get(3).getStoreTimestamp()));
            ctx.eq("searchOffset before everything", 0L, c.searchOffset(mq, all.get(0).getStoreTimestamp() - 60_000));
            ctx.eq("searchOffset after everything", 5L, c.searchOffset(mq, System.currentTimeMillis() + 3_600_000));
            try {
                ctx.eq("earliestMsgStoreTime (32)", all.get(0).getStoreTimestamp(), c.earliestMsgStoreTime(mq));
            } catch (Exception e) {
                ctx.fail("earliestMsgStoreTime (32): " + Main.chain(e));
            }
        }
    }

    /** VIEW_MESSAGE_BY_ID (33) with the offset msgId, QUERY_MESSAGE (12) by key and by unique key. */
    static void lookupByIdAndKey(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        SendResult r = p.send(msg(topic, "L", "lookup-key other-key", "lookup-body", props("x", "1")));
        p.send(msg(topic, "L", "unrelated", "other-body", null));
        readAll(ctx, topic, 2, 10_000); // stored and dispatched
        DefaultMQPullConsumer c = pullConsumer(ctx);
        try {
            MessageExt v = c.viewMessage(topic, r.getOffsetMsgId());
            ctx.eq("viewMessage body", "lookup-body", str(v.getBody()));
            ctx.eq("viewMessage user properties", props("x", "1"), userProps(v));
        } catch (Exception e) {
            ctx.fail("viewMessage(offsetMsgId): " + Main.chain(e));
        }
        long now = System.currentTimeMillis();
        try {
            QueryResult q = c.queryMessage(topic, "other-key", 32, now - 600_000, now + 600_000);
            ctx.eq("queryMessage by key: bodies", Arrays.asList("lookup-body"), Util.bodies(q.getMessageList()));
        } catch (Exception e) {
            ctx.fail("queryMessage by key: " + Main.chain(e));
        }
        try {
            MessageExt u = c.viewMessage(topic, r.getMsgId()); // a UNIQ_KEY: falls back to QUERY_MESSAGE with the unique flag
            ctx.eq("viewMessage(topic, UNIQ_KEY) body", "lookup-body", u == null ? null : str(u.getBody()));
        } catch (Exception e) {
            ctx.fail("viewMessage(topic, UNIQ_KEY): " + Main.chain(e));
        }
    }

    /**
     * The client's own {@code createTopic(key, topic, queues)}: UPDATE_AND_CREATE_TOPIC (17) to
     * every master of the key topic's route; the name server then routes the new topic with
     * exactly those queues, and a send to it is stored on one of them.
     */
    static void clientCreateTopic(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        Util.createTopic(p, p.getCreateTopicKey(), topic, 3);
        List<Integer> queueIds = new ArrayList<>();
        boolean routed = await(20_000, () -> {
            try {
                queueIds.clear();
                p.fetchPublishMessageQueues(topic).forEach(mq -> queueIds.add(mq.getQueueId()));
                return !queueIds.isEmpty();
            } catch (Exception e) {
                return false; // not routed yet
            }
        });
        ctx.check(routed, "topic created by the client has no route within 20 s");
        Collections.sort(queueIds);
        ctx.eq("queues of the created topic", Arrays.asList(0, 1, 2), queueIds);
        SendResult r = p.send(msg(topic, "C", null, "created-0", null));
        ctx.check(r.getMessageQueue().getQueueId() < 3, "sent to queue " + r.getMessageQueue().getQueueId());
        ctx.eq("bodies stored in the created topic", Arrays.asList("created-0"), Util.bodies(readAll(ctx, topic, 1, 10_000)));
    }

    /** TransactionMQProducer: COMMIT is delivered, ROLLBACK is not. */
    static void transactions(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer warm = producer(ctx);
        warm.send(msg(topic, "W", null, "tx-warm", null)); // creates the topic
        TransactionMQProducer p = new TransactionMQProducer(ctx.name("tpg"), WireLog.forScenario(ctx.scenario));
        p.setNamesrvAddr(ctx.namesrv);
        p.setInstanceName(Util.instance());
        p.setSendMsgTimeout(10_000);
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return str(msg.getBody()).equals("tx-commit") ? LocalTransactionState.COMMIT_MESSAGE
                    : LocalTransactionState.ROLLBACK_MESSAGE;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                return str(msg.getBody()).equals("tx-commit") ? LocalTransactionState.COMMIT_MESSAGE
                    : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        p.start();
        ctx.closeLater(p::shutdown);
        String txId = null;
        for (String body : new String[] {"tx-commit", "tx-rollback"}) {
            TransactionSendResult r = p.sendMessageInTransaction(msg(topic, "Tx", "tx-key", body, props("tx", body)), null);
            ctx.eq(body + " send status", SendStatus.SEND_OK, r.getSendStatus());
            ctx.eq(body + " local state", body.equals("tx-commit") ? LocalTransactionState.COMMIT_MESSAGE
                : LocalTransactionState.ROLLBACK_MESSAGE, r.getLocalTransactionState());
            if (body.equals("tx-commit")) {
                txId = r.getTransactionId();
            }
        }
        List<MessageExt> got = readAll(ctx, topic, 2, 10_000);
        Thread.sleep(1500);
        got = readAll(ctx, topic, 3, 1_000);
        ctx.eq("messages in the topic", Arrays.asList("tx-warm", "tx-commit"),
            got.stream().sorted((a, b) -> Long.compare(a.getStoreTimestamp(), b.getStoreTimestamp())).map(m -> str(m.getBody())).collect(Collectors.toList()));
        for (MessageExt m : got) {
            if (str(m.getBody()).equals("tx-commit")) {
                // The broker adds __transactionId__ (the half message's UNIQ_KEY) when it commits.
                ctx.eq("committed message user properties", props("tx", "tx-commit", "__transactionId__", txId), userProps(m));
                ctx.eq("committed message tags", "Tx", m.getTags());
            }
        }
    }

    /**
     * Check-back: the local transaction answers UNKNOW, so the half waits; the broker asks the
     * producer (CHECK_TRANSACTION_STATE) and the checker's COMMIT delivers one message, its
     * ROLLBACK drops the other.
     */
    static void transactionCheckBack(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer warm = producer(ctx);
        warm.send(msg(topic, "W", null, "cb-warm", null)); // creates the topic
        Map<String, String> checkedTopic = new java.util.concurrent.ConcurrentHashMap<>();
        Map<String, String> checkedTxId = new java.util.concurrent.ConcurrentHashMap<>();
        TransactionMQProducer p = new TransactionMQProducer(ctx.name("tpg"), WireLog.forScenario(ctx.scenario));
        p.setNamesrvAddr(ctx.namesrv);
        p.setInstanceName(Util.instance());
        p.setSendMsgTimeout(10_000);
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String body = str(msg.getBody());
                checkedTopic.put(body, msg.getTopic());
                checkedTxId.put(body, String.valueOf(msg.getTransactionId()));
                return body.equals("cb-commit") ? LocalTransactionState.COMMIT_MESSAGE
                    : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        p.start();
        ctx.closeLater(p::shutdown);
        Map<String, String> txIds = new HashMap<>();
        for (String body : new String[] {"cb-commit", "cb-rollback"}) {
            TransactionSendResult r = p.sendMessageInTransaction(msg(topic, "Cb", "cb-key", body, props("cb", body)), null);
            ctx.eq(body + " send status", SendStatus.SEND_OK, r.getSendStatus());
            ctx.eq(body + " local state", LocalTransactionState.UNKNOW, r.getLocalTransactionState());
            txIds.put(body, r.getTransactionId());
        }
        // Nothing is delivered while the halves wait for their check-back.
        ctx.eq("messages before the check-back", Arrays.asList("cb-warm"),
            readAll(ctx, topic, 2, 1_000).stream().map(m -> str(m.getBody())).collect(Collectors.toList()));
        List<MessageExt> got = readAll(ctx, topic, 2, 45_000);
        long deadline = System.currentTimeMillis() + 30_000;
        while (checkedTxId.size() < 2 && System.currentTimeMillis() < deadline) {
            Thread.sleep(200);
        }
        Thread.sleep(1500);
        got = readAll(ctx, topic, 3, 1_000);
        // Delivery is at least once: the Apache broker may check a half again before the
        // first check's COMMIT is recorded, and then stores the commit twice (seen with a 2 s
        // check interval under load). What must hold is which messages arrive.
        ctx.eq("messages after the check-back", new TreeSet<>(Arrays.asList("cb-warm", "cb-commit")),
            got.stream().map(m -> str(m.getBody())).collect(Collectors.toCollection(TreeSet::new)));
        for (String body : new String[] {"cb-commit", "cb-rollback"}) {
            ctx.eq(body + " checked message topic", topic, checkedTopic.get(body));
            ctx.eq(body + " checked transaction id", txIds.get(body), checkedTxId.get(body));
        }
        for (MessageExt m : got) {
            if (str(m.getBody()).equals("cb-commit")) {
                ctx.eq("committed message msgId", txIds.get("cb-commit"), m.getMsgId());
                Map<String, String> userProperties = userProps(m);
                String checks = userProperties.remove("TRANSACTION_CHECK_TIMES");
                ctx.check(checks != null && checks.matches("[1-9][0-9]*"),
                    "committed message TRANSACTION_CHECK_TIMES: expected a count of checks, observed " + checks);
                ctx.eq("committed message user properties",
                    props("cb", "cb-commit", "__transactionId__", txIds.get("cb-commit")), userProperties);
            }
        }
    }

    // ---- lite pull -----------------------------------------------------------------------------

    static DefaultLitePullConsumer lite(Ctx ctx, String group) {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group, WireLog.forScenario(ctx.scenario));
        c.setNamesrvAddr(ctx.namesrv);
        c.setInstanceName(Util.instance());
        c.setAutoCommit(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPollTimeoutMillis(1000);
        ctx.closeLater(c::shutdown);
        return c;
    }

    static void litePullSubscribe(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        DefaultMQProducer p = producer(ctx);
        for (int i = 0; i < 10; i++) {
            p.send(msg(topic, "LP", null, "lp-" + i, props("i", Integer.toString(i))));
        }
        DefaultLitePullConsumer c1 = lite(ctx, group);
        c1.subscribe(topic, "*");
        c1.start();
        List<String> first = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 25_000;
        while (new HashSet<>(first).size() < 10 && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c1.poll()) {
                first.add(str(m.getBody()));
                ctx.eq("user property i of " + str(m.getBody()), str(m.getBody()).substring(3), m.getUserProperty("i"));
            }
        }
        ctx.eq("first poller distinct bodies", 10, new HashSet<>(first).size());
        c1.commitSync(); // clustering: into the client's offset store, persisted every 5 s and at shutdown
        ctx.check(Util.awaitCommitted(p, group, topic, 10, 15_000),
            "offsets committed after commitSync: " + Util.committedTotal(p, group, topic) + "/10");
        c1.shutdown();
        for (int i = 0; i < 3; i++) {
            p.send(msg(topic, "LP", null, "lp-late-" + i, null));
        }
        DefaultLitePullConsumer c2 = lite(ctx, group);
        c2.subscribe(topic, "*");
        c2.start();
        List<String> second = new ArrayList<>();
        deadline = System.currentTimeMillis() + 20_000;
        long quietUntil = Long.MAX_VALUE;
        while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
            for (MessageExt m : c2.poll()) {
                second.add(str(m.getBody()));
            }
            if (second.size() >= 3 && quietUntil == Long.MAX_VALUE) {
                quietUntil = System.currentTimeMillis() + 2000;
            }
        }
        ctx.eq("second poller (same group, after commitSync)", Arrays.asList("lp-late-0", "lp-late-1", "lp-late-2"),
            second.stream().sorted().collect(Collectors.toList()));
    }

    static void litePullAssignSeek(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        DefaultMQProducer p = producer(ctx);
        MessageQueueSelector first = (mqs, msg, arg) -> mqs.get(0);
        int queueId = -1;
        for (int i = 0; i < 10; i++) {
            SendResult r = p.send(msg(topic, "AS", null, "as-" + i, null), first, null);
            queueId = r.getMessageQueue().getQueueId();
            ctx.eq("offset of as-" + i, (long) i, r.getQueueOffset());
        }
        DefaultLitePullConsumer c = lite(ctx, group);
        c.start();
        MessageQueue mq = null;
        for (MessageQueue q : c.fetchMessageQueues(topic)) {
            if (q.getQueueId() == queueId) {
                mq = q;
            }
        }
        if (!ctx.check(mq != null, "fetchMessageQueues has no queue " + queueId)) {
            return;
        }
        c.assign(Collections.singletonList(mq));
        // Read the queue to its end before seeking: assign starts a pull task at once, and a
        // seek that lands while that first pull is in flight races inside the client (the
        // in-flight answer can be cached after the seek cleared the cache), on any broker.
        // Once the queue is read, the only pull in flight waits at offset 10 and finds nothing.
        List<Long> before = pollOffsets(c, 10);
        ctx.eq("offsets polled after assign", Arrays.asList(0L, 1L, 2L, 3L, 4L, 5L, 6L, 7L, 8L, 9L), before);
        c.seek(mq, 4);
        List<Long> offsets = new ArrayList<>();
        List<String> bodies = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 20_000;
        while (bodies.size() < 6 && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll()) {
                offsets.add(m.getQueueOffset());
                bodies.add(str(m.getBody()));
            }
        }
        ctx.eq("offsets polled after seek(4)", Arrays.asList(4L, 5L, 6L, 7L, 8L, 9L), offsets);
        ctx.eq("bodies polled after seek(4)", Arrays.asList("as-4", "as-5", "as-6", "as-7", "as-8", "as-9"), bodies);
        c.commitSync();
        final MessageQueue q = mq;
        long[] committed = {-99};
        await(10_000, () -> {
            try {
                committed[0] = c.committed(q);
            } catch (Exception e) {
                committed[0] = -98;
            }
            return committed[0] == 10;
        });
        ctx.eq("committed offset read back from the broker", 10L, committed[0]);
    }

    /**
     * Request-reply: {@code producer.request(msg, timeout)} gets the answer a push consumer builds
     * with {@code MessageUtil.createReplyMessage} and sends with its own producer. The reply goes
     * to the cluster's reply topic (named after the CLUSTER property the broker stamped on the
     * request), the client sends it as SEND_REPLY_MESSAGE(_V2), and the broker pushes it to the
     * requester's connection (PUSH_REPLY_MESSAGE_TO_CLIENT). Then: a request nobody answers ends
     * in RequestTimeoutException, and a reply for a client that is not connected is refused by
     * the broker with SYSTEM_ERROR.
     */
    static void requestReply(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer requester = producer(ctx);
        DefaultMQProducer replier = producer(ctx);
        // The topic exists for the consumer. Not sent by the requester: its first request() must
        // find the topic's route new, which is when a 4.x client sends the heartbeat that lets the
        // broker find its connection (a 5.x client also sends one when a connection opens).
        replier.send(msg(topic, "warm", null, "warm", null));
        List<SendResult> replySends = new CopyOnWriteArrayList<>();
        List<String> replyErrors = new CopyOnWriteArrayList<>();
        Map<String, String> clusterOfRequest = new ConcurrentHashMap<>();
        DefaultMQPushConsumer c = push(ctx, ctx.name("cg"));
        c.subscribe(topic, "*");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
            for (MessageExt m : msgs) {
                if (m.getProperty(MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT) == null) {
                    continue; // the warm-up message
                }
                String body = str(m.getBody());
                clusterOfRequest.put(body, String.valueOf(m.getProperty(MessageConst.PROPERTY_CLUSTER)));
                try {
                    Message reply = MessageUtil.createReplyMessage(m, utf8("reply-to-" + body));
                    replySends.add(replier.send(reply));
                } catch (Exception e) {
                    replyErrors.add(body + ": " + Main.chain(e));
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();

        for (int i = 0; i < 3; i++) {
            String body = "request-" + i;
            Message request = msg(topic, "req", null, body, props("n", String.valueOf(i)));
            Message reply;
            try {
                reply = requester.request(request, 30_000);
            } catch (Exception e) {
                ctx.fail("request " + body + ": " + Main.chain(e));
                continue;
            }
            if (!ctx.check(reply != null, "request " + body + " got no reply")) {
                continue;
            }
            ctx.eq(body + ": reply body", "reply-to-" + body, str(reply.getBody()));
            String cluster = clusterOfRequest.get(body);
            ctx.check(cluster != null && !cluster.equals("null"), body + ": the stored request carries CLUSTER");
            ctx.eq(body + ": reply topic", cluster + "_REPLY_TOPIC", reply.getTopic());
            ctx.eq(body + ": reply MSG_TYPE", "reply", reply.getProperty(MessageConst.PROPERTY_MESSAGE_TYPE));
            ctx.eq(body + ": reply CORRELATION_ID", request.getProperty(MessageConst.PROPERTY_CORRELATION_ID),
                reply.getProperty(MessageConst.PROPERTY_CORRELATION_ID));
            ctx.check(request.getProperty(MessageConst.PROPERTY_CORRELATION_ID) != null,
                body + ": request() put a CORRELATION_ID on the request");
            ctx.eq(body + ": reply REPLY_TO_CLIENT", request.getProperty(MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT),
                reply.getProperty(MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT));
            ctx.check(reply.getProperty(MessageConst.PROPERTY_PUSH_REPLY_TIME) != null,
                body + ": the broker stamped PUSH_REPLY_TIME on the pushed reply");
        }
        // The requester has its reply before the replier has the answer to its send.
        await(20_000, () -> replySends.size() + replyErrors.size() >= 3);
        ctx.eq("errors sending replies", Collections.emptyList(), replyErrors);
        ctx.eq("reply sends", 3, replySends.size());
        for (SendResult r : replySends) {
            ctx.eq("reply send status", SendStatus.SEND_OK, r.getSendStatus());
            ctx.note("reply send: offsetMsgId " + r.getOffsetMsgId() + ", queue " + r.getMessageQueue()
                + ", queueOffset " + r.getQueueOffset());
        }

        // Nobody consumes this topic: the request times out on the requester's side.
        String silent = ctx.name("t");
        requester.send(msg(silent, "warm", null, "warm", null));
        long start = System.currentTimeMillis();
        try {
            Message r = requester.request(msg(silent, "req", null, "unanswered", null), 2_000);
            ctx.fail("a request nobody answers returned " + (r == null ? "null" : str(r.getBody())));
        } catch (RequestTimeoutException e) {
            ctx.check(System.currentTimeMillis() - start >= 1_900, "the timeout waited its 2 s");
        } catch (Exception e) {
            ctx.fail("a request nobody answers: expected RequestTimeoutException, got " + Main.chain(e));
        }

        // A reply for a client that is not connected: the broker cannot push it.
        String cluster = clusterOfRequest.values().stream().findFirst().orElse("DefaultCluster");
        Message orphan = new Message(cluster + "_REPLY_TOPIC", utf8("orphan"));
        MessageAccessor.putProperty(orphan, MessageConst.PROPERTY_MESSAGE_TYPE, "reply");
        MessageAccessor.putProperty(orphan, MessageConst.PROPERTY_CORRELATION_ID, "no-such-request");
        MessageAccessor.putProperty(orphan, MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT, "127.0.0.9@no-such-client");
        try {
            SendResult r = replier.send(orphan);
            ctx.fail("a reply to an unknown client was accepted: " + r);
        } catch (Exception e) {
            // SYSTEM_ERROR is a code the client retries, so the broker's answer may come wrapped.
            Throwable t = e;
            while (t != null && !(t instanceof MQBrokerException)) {
                t = t.getCause();
            }
            if (ctx.check(t != null, "a reply to an unknown client: expected the broker's refusal, got " + Main.chain(e))) {
                MQBrokerException b = (MQBrokerException) t;
                ctx.eq("response code of a reply to an unknown client", 1, b.getResponseCode());
                ctx.note("reply to an unknown client refused: " + b.getErrorMessage());
            }
        }
    }
}
