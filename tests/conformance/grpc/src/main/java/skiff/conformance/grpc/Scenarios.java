package skiff.conformance.grpc;

import static skiff.conformance.grpc.Util.AWAIT;
import static skiff.conformance.grpc.Util.Got;
import static skiff.conformance.grpc.Util.await;
import static skiff.conformance.grpc.Util.bodies;
import static skiff.conformance.grpc.Util.code;
import static skiff.conformance.grpc.Util.drain;
import static skiff.conformance.grpc.Util.keys;
import static skiff.conformance.grpc.Util.msg;
import static skiff.conformance.grpc.Util.producer;
import static skiff.conformance.grpc.Util.producerWith;
import static skiff.conformance.grpc.Util.props;
import static skiff.conformance.grpc.Util.push;
import static skiff.conformance.grpc.Util.receive;
import static skiff.conformance.grpc.Util.simple;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;
import org.apache.rocketmq.client.java.message.MessageViewImpl;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The gRPC scenarios. Each creates its own topics and groups (admin over remoting), talks to the
 * gRPC endpoint with the Java client only, and checks what it observes against what it sent.
 * Timing facts pinned here are the proxy's defaults: a receive's invisible duration is at least
 * 10 s (minInvisibleTimeMillsForRecv), a receive long-polls at least 5 s.
 */
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

    /** The proxy's smallest invisible duration for a receive (minInvisibleTimeMillsForRecv). */
    static final Duration MIN_INVISIBLE = Duration.ofSeconds(10);
    static final Duration INVISIBLE = Duration.ofSeconds(20);

    static Map<String, Def> all() {
        Map<String, Def> m = new LinkedHashMap<>();
        m.put("producer_sync_normal", new Def(60, Scenarios::producerSyncNormal));
        m.put("producer_async_normal", new Def(60, Scenarios::producerAsyncNormal));
        m.put("producer_fifo", new Def(90, Scenarios::producerFifo));
        m.put("producer_delay", new Def(60, Scenarios::producerDelay));
        m.put("producer_recall", new Def(60, Scenarios::producerRecall));
        m.put("producer_priority", new Def(90, Scenarios::producerPriority));
        m.put("lite_subscribe_receive", new Def(90, LiteScenarios::liteSubscribeReceive));
        m.put("lite_offset_max", new Def(60, LiteScenarios::liteOffsetMax));
        m.put("lite_illegal_name", new Def(60, LiteScenarios::liteIllegalName));
        m.put("lite_exclusive", new Def(60, LiteScenarios::liteExclusive));
        m.put("lite_quota", new Def(60, LiteScenarios::liteQuota));
        m.put("lite_dlq", new Def(300, LiteScenarios::liteDlq));
        m.put("lite_subscription_expiry", new Def(180, LiteScenarios::liteSubscriptionExpiry));
        m.put("lite_ttl_expiry", new Def(240, LiteScenarios::liteTtlExpiry));
        m.put("producer_transaction_commit", new Def(60, Scenarios::producerTransactionCommit));
        m.put("producer_transaction_rollback", new Def(60, Scenarios::producerTransactionRollback));
        m.put("transaction_checkback", new Def(90, Scenarios::transactionCheckback));
        m.put("simple_receive_ack", new Def(60, Scenarios::simpleReceiveAck));
        m.put("simple_change_invisible", new Def(60, Scenarios::simpleChangeInvisible));
        m.put("simple_redelivery", new Def(60, Scenarios::simpleRedelivery));
        m.put("simple_dlq", new Def(120, Scenarios::simpleDlq));
        m.put("push_concurrent", new Def(60, Scenarios::pushConcurrent));
        m.put("push_fifo", new Def(90, Scenarios::pushFifo));
        m.put("push_retry", new Def(60, Scenarios::pushRetry));
        m.put("namespace", new Def(60, Scenarios::namespace));
        m.put("error_unknown_topic", new Def(60, Scenarios::errorUnknownTopic));
        m.put("error_forged_receipt_handle", new Def(60, Scenarios::errorForgedReceiptHandle));
        m.put("error_oversize_body", new Def(60, Scenarios::errorOversizeBody));
        m.put("cross_grpc_to_remoting_push", new Def(60, CrossScenarios::grpcToRemotingPush));
        m.put("cross_remoting_to_grpc_simple", new Def(60, CrossScenarios::remotingToGrpcSimple));
        m.put("cross_mixed_group", new Def(120, CrossScenarios::mixedGroup));
        return m;
    }

    // ---- helpers ------------------------------------------------------------------------------

    static String topic(Ctx ctx, String type) throws Exception {
        String t = ctx.name("t");
        ctx.admin.createTopic(t, type);
        return t;
    }

    static String group(Ctx ctx, boolean fifo, int retryMaxTimes) throws Exception {
        String g = ctx.name("g");
        ctx.admin.createGroup(g, fifo, retryMaxTimes);
        return g;
    }

    /** A sent message as the checks need it. */
    static final class Sent {
        final String id;
        final String body;
        final String tag;
        final List<String> keys;
        final Map<String, String> props;
        final String group;
        final long before;
        final long after;

        /** A message sent over remoting (DefaultMQProducer): id = its msgId (UNIQ_KEY). */
        Sent(String id, String body, String tag, List<String> keys, Map<String, String> props, long before,
            long after) {
            this.id = id;
            this.body = body;
            this.tag = tag;
            this.keys = new ArrayList<>(new java.util.TreeSet<>(keys));
            this.props = new java.util.TreeMap<>(props);
            this.group = null;
            this.before = before;
            this.after = after;
        }

        Sent(String id, Message m, long before, long after) {
            this.id = id;
            byte[] b = new byte[m.getBody().remaining()];
            m.getBody().duplicate().get(b);
            this.body = new String(b, java.nio.charset.StandardCharsets.UTF_8);
            this.tag = m.getTag().orElse(null);
            this.keys = new ArrayList<>(new java.util.TreeSet<>(m.getKeys()));
            this.props = new java.util.TreeMap<>(m.getProperties());
            this.group = m.getMessageGroup().orElse(null);
            if (group != null) {
                // The proxy hands the message group back twice: as message_group and as the
                // user property __SHARDINGKEY (the broker's property for it).
                props.put("__SHARDINGKEY", group);
            }
            this.before = before;
            this.after = after;
        }
    }

    static Sent send(Producer p, Message m) throws Exception {
        long before = System.currentTimeMillis();
        SendReceipt r = p.send(m);
        return new Sent(r.getMessageId().toString(), m, before, System.currentTimeMillis());
    }

    /** Everything a delivered message must carry of what was sent. */
    static void same(Ctx ctx, String what, Sent s, String topic, MessageView v, int attempt) {
        same(ctx, what, s, topic, v, attempt, Map.of());
    }

    /** As above; {@code extra} are properties the server adds (value null: any value). */
    static void same(Ctx ctx, String what, Sent s, String topic, MessageView v, int attempt,
        Map<String, String> extra) {
        Map<String, String> want = new java.util.TreeMap<>(s.props);
        Map<String, String> have = props(v);
        for (Map.Entry<String, String> e : extra.entrySet()) {
            if (e.getValue() == null) {
                String got = have.get(e.getKey());
                ctx.check(got != null && !got.isEmpty(), what + " has no property " + e.getKey() + ": " + have);
                want.put(e.getKey(), got);
            } else {
                want.put(e.getKey(), e.getValue());
            }
        }
        ctx.eq(what + " message id", s.id, v.getMessageId().toString());
        ctx.eq(what + " topic", topic, v.getTopic());
        ctx.eq(what + " body", s.body, Util.body(v));
        ctx.eq(what + " tag", s.tag, v.getTag().orElse(null));
        ctx.eq(what + " keys", s.keys, keys(v));
        ctx.eq(what + " properties", want, have);
        ctx.eq(what + " message group", s.group, v.getMessageGroup().orElse(null));
        ctx.eq(what + " delivery attempt", attempt, v.getDeliveryAttempt());
        ctx.check(v.getBornTimestamp() >= s.before - 1000 && v.getBornTimestamp() <= s.after + 1000,
            what + " born timestamp " + v.getBornTimestamp() + " outside the send [" + s.before + ", " + s.after + "]");
        ctx.check(v.getBornHost() != null && !v.getBornHost().isEmpty(), what + " has no born host");
    }

    private static Map<String, Sent> byId(List<Sent> sent) {
        Map<String, Sent> m = new HashMap<>();
        for (Sent s : sent) {
            m.put(s.id, s);
        }
        return m;
    }

    /** Each sent message delivered exactly once (attempt 1), with its content. */
    private static void exactlyOnce(Ctx ctx, List<Sent> sent, String topic, List<Got> got) {
        Map<String, Sent> ids = byId(sent);
        ctx.eq("distinct message ids from the sends", sent.size(), ids.size());
        Set<String> seen = new HashSet<>();
        for (Got g : got) {
            Sent s = ids.get(g.id());
            if (!ctx.check(s != null, "delivered a message that was not sent: " + g.id() + " " + g.body)) {
                continue;
            }
            ctx.check(seen.add(g.id()), "delivered twice: " + g.id() + " " + g.body);
            same(ctx, s.body, s, topic, g.view, 1);
        }
        ctx.eq("messages delivered", sent.size(), seen.size());
    }

    // ---- producers ----------------------------------------------------------------------------

    /** 4 sync sends (tags, two keys, user properties incl. non-ASCII), read back by a new group. */
    static void producerSyncNormal(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producer(ctx, topic);
        List<Sent> sent = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            Message m = msg(topic, i % 2 == 0 ? "TagA" : "TagB", "sync-" + i + "-ünïcødé", "key" + i + "a", "key" + i + "b")
                .addProperty("index", String.valueOf(i)).addProperty("city", "Zürich").build();
            sent.add(send(p, m));
        }
        ctx.note("ids " + sent.get(0).id + "..");
        List<Got> got = receive(c, 4, INVISIBLE, 30_000, true);
        exactlyOnce(ctx, sent, topic, got);
    }

    /** 6 sendAsync: every future completes with a distinct id; all read back. */
    static void producerAsyncNormal(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producer(ctx, topic);
        List<Message> ms = new ArrayList<>();
        List<CompletableFuture<SendReceipt>> fs = new ArrayList<>();
        long before = System.currentTimeMillis();
        for (int i = 0; i < 6; i++) {
            Message m = msg(topic, "Async", "async-" + i, "akey" + i).build();
            ms.add(m);
            fs.add(p.sendAsync(m));
        }
        List<Sent> sent = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            SendReceipt r = fs.get(i).get(15, TimeUnit.SECONDS);
            sent.add(new Sent(r.getMessageId().toString(), ms.get(i), before, System.currentTimeMillis()));
        }
        List<Got> got = receive(c, 6, INVISIBLE, 30_000, true);
        exactlyOnce(ctx, sent, topic, got);
    }

    /**
     * FIFO topic, FIFO group (consumeMessageOrderly): 3 message groups x 5 messages, interleaved;
     * a SimpleConsumer receives each group in send order, every message with its group.
     */
    static void producerFifo(Ctx ctx) throws Exception {
        String topic = topic(ctx, "FIFO");
        String group = group(ctx, true, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producer(ctx, topic);
        List<Sent> sent = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            for (String g : Arrays.asList("ga", "gb", "gc")) {
                sent.add(send(p, msg(topic, "Fifo", g + "-" + i, g + "key" + i).setMessageGroup(g).build()));
            }
        }
        List<Got> got = receive(c, 15, INVISIBLE, 45_000, true);
        exactlyOnce(ctx, sent, topic, got);
        checkGroupOrder(ctx, sent, got);
    }

    private static void checkGroupOrder(Ctx ctx, List<Sent> sent, List<Got> got) {
        Map<String, List<String>> want = new LinkedHashMap<>();
        for (Sent s : sent) {
            want.computeIfAbsent(s.group, k -> new ArrayList<>()).add(s.body);
        }
        Map<String, List<String>> have = new LinkedHashMap<>();
        for (Got g : got) {
            have.computeIfAbsent(g.view.getMessageGroup().orElse("?"), k -> new ArrayList<>()).add(g.body);
        }
        for (Map.Entry<String, List<String>> e : want.entrySet()) {
            ctx.eq("order of message group " + e.getKey(), e.getValue(), have.get(e.getKey()));
        }
    }

    /**
     * DELAY topic, delivery timestamp ~3 s ahead on a whole second (the broker's timer wheel
     * rounds down to the second): never received before it, received within 10 s after it, with
     * the delivery timestamp.
     */
    static void producerDelay(Ctx ctx) throws Exception {
        String topic = topic(ctx, "DELAY");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producer(ctx, topic);
        long deliverAt = (System.currentTimeMillis() + 3000) / 1000 * 1000 + 1000;
        Sent s = send(p, msg(topic, "Delay", "delayed", "dkey").setDeliveryTimestamp(deliverAt).build());
        List<Got> got = receive(c, 1, INVISIBLE, 20_000, true);
        if (!ctx.eq("delayed messages received", 1, got.size())) {
            return;
        }
        Got g = got.get(0);
        same(ctx, "delayed", s, topic, g.view, 1);
        ctx.eq("delivery timestamp", Optional.of(deliverAt), g.view.getDeliveryTimestamp());
        ctx.check(g.at >= deliverAt, "received " + (deliverAt - g.at) + " ms before its delivery time");
        ctx.check(g.at <= deliverAt + 10_000, "received " + (g.at - deliverAt) + " ms after its delivery time");
        ctx.note("received " + (g.at - deliverAt) + " ms after the delivery time");
    }

    /**
     * Recall (5.3.2): two DELAY messages due ~4 s ahead each answer a recall handle; the first,
     * recalled before its time, answers its message id and is never received while the second
     * is; recalling the second after its time is refused (the proxy: INTERNAL_SERVER_ERROR), and
     * so is a handle that is not one.
     */
    static void producerRecall(Ctx ctx) throws Exception {
        String topic = topic(ctx, "DELAY");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producer(ctx, topic);
        long deliverAt = (System.currentTimeMillis() + 4000) / 1000 * 1000 + 1000;
        SendReceipt recalled = p.send(msg(topic, "Recall", "recalled", "rkey").setDeliveryTimestamp(deliverAt).build());
        SendReceipt kept = p.send(msg(topic, "Recall", "kept", "kkey").setDeliveryTimestamp(deliverAt).build());
        String handle = recalled.getRecallHandle();
        if (!ctx.check(handle != null && !handle.isEmpty(), "a delay send answers a recall handle: " + handle)) {
            return;
        }
        ctx.eq("recalled message id", recalled.getMessageId().toString(),
            p.recallMessage(topic, handle).getMessageId().toString());
        List<Got> got = receive(c, 1, INVISIBLE, 20_000, true);
        // Two more seconds of receives: the recalled one would have come with the kept one.
        got.addAll(drain(c, INVISIBLE, 2_000, true));
        ctx.eq("received after the delivery time", List.of("kept"), bodies(got));
        try {
            p.recallMessage(topic, kept.getRecallHandle());
            ctx.fail("a recall after the delivery time succeeded");
        } catch (ClientException e) {
            ctx.eq("late recall: status code", 50001, code(e));
        }
        try {
            p.recallMessage(topic, "not-a-recall-handle");
            ctx.fail("a recall by a forged handle succeeded");
        } catch (ClientException e) {
            ctx.eq("forged recall: status code", 50001, code(e));
        }
    }

    /**
     * Priority messages (RocketMQ 5.4): a backlog sent in mixed order to an eight-queue PRIORITY
     * topic is received highest first, one at a time; priority 99 shares the last queue with 7
     * (sent after it) and reads back as 99.
     */
    static void producerPriority(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        ctx.admin.createTopic(topic, "PRIORITY", 8);
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producer(ctx, topic);
        for (int priority : new int[] {3, 0, 7, 5, 1, 99, 6, 2, 4}) {
            p.send(msg(topic, "Prio", "p" + priority, "prio" + priority).setPriority(priority).build());
        }
        List<String> order = new ArrayList<>();
        List<String> priorities = new ArrayList<>();
        for (int i = 0; i < 9; i++) {
            List<Got> one = receive(c, 1, INVISIBLE, 20_000, true);
            if (!ctx.eq("receive " + i + " got one message", 1, one.size())) {
                break;
            }
            order.add(one.get(0).body);
            priorities.add(one.get(0).view.getPriority().map(String::valueOf).orElse("none"));
        }
        ctx.eq("received highest priority first",
            List.of("p7", "p99", "p6", "p5", "p4", "p3", "p2", "p1", "p0"), order);
        ctx.eq("each message's priority as sent",
            List.of("7", "99", "6", "5", "4", "3", "2", "1", "0"), priorities);
    }

    /** A half message is invisible until the commit; after it, delivered once. */
    static void producerTransactionCommit(Ctx ctx) throws Exception {
        String topic = topic(ctx, "TRANSACTION");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        AtomicInteger checks = new AtomicInteger();
        // UNKNOWN: only the commit may make it visible (the broker checks back after 3 s).
        Producer p = producerWith(ctx, null, v -> {
            checks.incrementAndGet();
            return TransactionResolution.UNKNOWN;
        }, topic);
        Transaction tx = p.beginTransaction();
        Message m = msg(topic, "Tx", "committed", "txkey").addProperty("tx", "commit").build();
        long before = System.currentTimeMillis();
        SendReceipt r = p.send(m, tx);
        Sent s = new Sent(r.getMessageId().toString(), m, before, System.currentTimeMillis());
        List<Got> early = drain(c, INVISIBLE, 1000, true);
        ctx.eq("delivered before the commit", List.of(), bodies(early));
        tx.commit();
        List<Got> got = receive(c, 1, INVISIBLE, 20_000, true);
        if (ctx.eq("committed messages received", 1, got.size())) {
            // TRANSACTION_CHECK_TIMES appears when a check-back came before the commit (the
            // receive that shows the half message invisible long-polls 5 s, past the broker's
            // 3 s transaction timeout).
            Map<String, String> extra = new HashMap<>(TX_ID);
            String times = got.get(0).view.getProperties().get("TRANSACTION_CHECK_TIMES");
            if (times != null) {
                ctx.check(checks.get() >= 1, "TRANSACTION_CHECK_TIMES " + times + " without a check-back");
                extra.put("TRANSACTION_CHECK_TIMES", times);
                ctx.note("TRANSACTION_CHECK_TIMES " + times);
            }
            same(ctx, "committed", s, topic, got.get(0).view, 1, extra);
        }
        ctx.note("checker calls " + checks.get());
    }

    /** A delivered transactional message carries the user property __transactionId__. */
    private static final Map<String, String> TX_ID = Collections.singletonMap("__transactionId__", null);

    /** A rolled-back message is never delivered; a committed one after it is. */
    static void producerTransactionRollback(Ctx ctx) throws Exception {
        String topic = topic(ctx, "TRANSACTION");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producerWith(ctx, null, v -> TransactionResolution.ROLLBACK, topic);
        Transaction tx1 = p.beginTransaction();
        p.send(msg(topic, "Tx", "rolled-back", "rbkey").build(), tx1);
        tx1.rollback();
        Transaction tx2 = p.beginTransaction();
        Message m = msg(topic, "Tx", "sentinel", "skey").build();
        long before = System.currentTimeMillis();
        SendReceipt r = p.send(m, tx2);
        Sent s = new Sent(r.getMessageId().toString(), m, before, System.currentTimeMillis());
        tx2.commit();
        List<Got> got = receive(c, 1, INVISIBLE, 20_000, true);
        // Whatever else comes in the next long polls (past the broker's 3 s transaction timeout
        // and a check round) must not be the rolled-back one.
        got.addAll(drain(c, INVISIBLE, 6000, true));
        ctx.eq("bodies delivered", List.of("sentinel"), bodies(got));
        if (got.size() == 1) {
            same(ctx, "sentinel", s, topic, got.get(0).view, 1, TX_ID);
        }
    }

    /**
     * No commit or rollback: the broker checks the half message back through the Telemetry
     * stream; the checker answers UNKNOWN first, COMMIT the next time; then it is delivered.
     */
    static void transactionCheckback(Ctx ctx) throws Exception {
        String topic = topic(ctx, "TRANSACTION");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        List<Long> checkTimes = new CopyOnWriteArrayList<>();
        List<String> checkedIds = new CopyOnWriteArrayList<>();
        List<String> checkedBodies = new CopyOnWriteArrayList<>();
        Producer p = producerWith(ctx, null, v -> {
            checkTimes.add(System.currentTimeMillis());
            checkedIds.add(v.getMessageId().toString());
            checkedBodies.add(Util.body(v));
            return checkTimes.size() == 1 ? TransactionResolution.UNKNOWN : TransactionResolution.COMMIT;
        }, topic);
        Transaction tx = p.beginTransaction();
        Message m = msg(topic, "Tx", "checked-back", "cbkey").addProperty("tx", "check").build();
        long before = System.currentTimeMillis();
        SendReceipt r = p.send(m, tx);
        Sent s = new Sent(r.getMessageId().toString(), m, before, System.currentTimeMillis());
        // the transaction is left open: neither commit() nor rollback()
        List<Got> got = receive(c, 1, INVISIBLE, 60_000, true);
        ctx.check(checkTimes.size() >= 2, "checker called " + checkTimes.size() + " times, expected at least 2");
        if (!ctx.eq("checked-back messages received", 1, got.size())) {
            return;
        }
        // ... and TRANSACTION_CHECK_TIMES, the number of check-backs before the commit.
        Map<String, String> extra = new HashMap<>(TX_ID);
        extra.put("TRANSACTION_CHECK_TIMES", String.valueOf(checkTimes.size()));
        same(ctx, "checked-back", s, topic, got.get(0).view, 1, extra);
        ctx.eq("checked message ids", Collections.nCopies(checkTimes.size(), s.id), checkedIds);
        ctx.eq("checked bodies", Collections.nCopies(checkTimes.size(), s.body), checkedBodies);
        if (checkTimes.size() >= 2) {
            ctx.check(got.get(0).at >= checkTimes.get(1), "delivered before the checker's COMMIT");
            ctx.note("first check " + (checkTimes.get(0) - s.after) + " ms after the send, second "
                + (checkTimes.get(1) - checkTimes.get(0)) + " ms later; delivered "
                + (got.get(0).at - checkTimes.get(1)) + " ms after it");
        }
    }

    // ---- simple consumer ----------------------------------------------------------------------

    /** Receive + ack: content as sent; acked messages do not come back after the invisible time. */
    static void simpleReceiveAck(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producer(ctx, topic);
        List<Sent> sent = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            sent.add(send(p, msg(topic, "Simple", "simple-" + i, "skey" + i).addProperty("n", "" + i).build()));
        }
        long t0 = System.currentTimeMillis();
        List<Got> got = receive(c, 3, MIN_INVISIBLE, 30_000, true);
        exactlyOnce(ctx, sent, topic, got);
        // Past the 10 s invisible duration: nothing comes back.
        long wait = t0 + MIN_INVISIBLE.toMillis() + 3000 - System.currentTimeMillis();
        List<Got> again = drain(c, MIN_INVISIBLE, Math.max(wait, 1000), true);
        ctx.eq("delivered again after the ack", List.of(), bodies(again));
    }

    /**
     * Received with a 30 s invisible duration, changed to 3 s: it comes back not before the 3 s
     * (counted from the change request) and long before the 30 s, with delivery attempt 2.
     */
    static void simpleChangeInvisible(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producer(ctx, topic);
        Sent s = send(p, msg(topic, "Change", "change-me", "ckey").build());
        List<Got> got = receive(c, 1, Duration.ofSeconds(30), 20_000, false);
        if (!ctx.eq("first receive", 1, got.size())) {
            return;
        }
        same(ctx, "first delivery", s, topic, got.get(0).view, 1);
        long tc = System.currentTimeMillis();
        c.changeInvisibleDuration(got.get(0).view, Duration.ofSeconds(3));
        List<Got> back = receive(c, 1, Duration.ofSeconds(30), 20_000, true);
        if (!ctx.eq("came back", 1, back.size())) {
            return;
        }
        Got b = back.get(0);
        same(ctx, "second delivery", s, topic, b.view, 2);
        ctx.check(b.at >= tc + 3000, "came back " + (b.at - tc) + " ms after the change to 3 s");
        ctx.check(b.at < tc + 25_000, "came back only " + (b.at - tc) + " ms after the change to 3 s");
        ctx.note("back " + (b.at - tc) + " ms after the change");
    }

    /** Not acked: redelivered after the 10 s invisible duration, same id, delivery attempt 2. */
    static void simpleRedelivery(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producer(ctx, topic);
        Sent s = send(p, msg(topic, "Redeliver", "redeliver-me", "rkey").build());
        long t0 = System.currentTimeMillis();
        List<Got> got = receive(c, 1, MIN_INVISIBLE, 20_000, false);
        if (!ctx.eq("first receive", 1, got.size())) {
            return;
        }
        same(ctx, "first delivery", s, topic, got.get(0).view, 1);
        List<Got> back = receive(c, 1, MIN_INVISIBLE, 30_000, true);
        if (!ctx.eq("redelivered", 1, back.size())) {
            return;
        }
        same(ctx, "redelivery", s, topic, back.get(0).view, 2);
        long gap = back.get(0).at - t0;
        ctx.check(gap >= MIN_INVISIBLE.toMillis(), "redelivered " + gap + " ms after the receive, before its 10 s");
        ctx.note("redelivered " + gap + " ms after the first receive call");
    }

    /**
     * A group with retryMaxTimes 1 (max delivery attempts 2): after two unacked deliveries the
     * message is not delivered again but lands in %DLQ%group, with its id, body, keys and tag.
     */
    static void simpleDlq(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 1);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producer(ctx, topic);
        Sent s = send(p, msg(topic, "Dlq", "to-the-dlq", "dlqkey").addProperty("d", "1").build());
        List<Got> got = receive(c, 1, MIN_INVISIBLE, 20_000, false);
        if (!ctx.eq("first receive", 1, got.size())) {
            return;
        }
        same(ctx, "attempt 1", s, topic, got.get(0).view, 1);
        List<Got> second = receive(c, 1, MIN_INVISIBLE, 30_000, false);
        if (!ctx.eq("second receive", 1, second.size())) {
            return;
        }
        same(ctx, "attempt 2", s, topic, second.get(0).view, 2);
        // The third pop finds the message over its attempts and moves it to the DLQ.
        long t2 = second.get(0).at;
        List<Got> third = drain(c, MIN_INVISIBLE, Math.max(1000, t2 + MIN_INVISIBLE.toMillis() + 5000 - System.currentTimeMillis()), true);
        ctx.eq("delivered after the last attempt", List.of(), bodies(third));
        String dlq = "%DLQ%" + group;
        List<MessageExt> inDlq = ctx.admin.readAll(dlq, 1, 20_000);
        if (!ctx.eq("messages in " + dlq, 1, inDlq.size())) {
            return;
        }
        MessageExt d = inDlq.get(0);
        ctx.eq("DLQ message id (UNIQ_KEY)", s.id, d.getMsgId());
        ctx.eq("DLQ body", s.body, new String(d.getBody(), java.nio.charset.StandardCharsets.UTF_8));
        ctx.eq("DLQ keys", "dlqkey", d.getKeys());
        ctx.eq("DLQ tag", "Dlq", d.getTags());
        ctx.eq("DLQ user property d", "1", d.getUserProperty("d"));
        ctx.note("DLQ reconsumeTimes " + d.getReconsumeTimes() + ", RETRY_TOPIC " + d.getProperty("RETRY_TOPIC")
            + ", ORIGIN_MESSAGE_ID " + d.getProperty("ORIGIN_MESSAGE_ID"));
    }

    // ---- push consumer ------------------------------------------------------------------------

    /** 10 messages, a push consumer with 4 threads: each consumed once, as sent. */
    static void pushConcurrent(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        List<Got> got = new CopyOnWriteArrayList<>();
        push(ctx, group, topic, v -> {
            got.add(new Got(v, System.currentTimeMillis()));
            return ConsumeResult.SUCCESS;
        });
        Producer p = producer(ctx, topic);
        List<Sent> sent = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            sent.add(send(p, msg(topic, "Push", "push-" + i, "pkey" + i).addProperty("i", "" + i).build()));
        }
        long lastSend = System.currentTimeMillis();
        await(45_000, () -> new HashSet<>(bodies(got)).size() >= 10);
        noteArrival(ctx, got, lastSend);
        // a little longer, so a duplicate would show
        Thread.sleep(1000);
        exactlyOnce(ctx, sent, topic, new ArrayList<>(got));
    }

    private static void noteArrival(Ctx ctx, List<Got> got, long lastSend) {
        long first = Long.MAX_VALUE;
        long last = 0;
        for (Got g : got) {
            first = Math.min(first, g.at);
            last = Math.max(last, g.at);
        }
        ctx.note("consumed " + (first - lastSend) + ".." + (last - lastSend) + " ms after the last send");
    }

    /** FIFO group, push consumer: 3 message groups x 6, each consumed in send order, once. */
    static void pushFifo(Ctx ctx) throws Exception {
        String topic = topic(ctx, "FIFO");
        String group = group(ctx, true, 16);
        List<Got> got = new CopyOnWriteArrayList<>();
        push(ctx, group, topic, v -> {
            got.add(new Got(v, System.currentTimeMillis()));
            return ConsumeResult.SUCCESS;
        });
        Producer p = producer(ctx, topic);
        List<Sent> sent = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            for (String g : Arrays.asList("pa", "pb", "pc")) {
                sent.add(send(p, msg(topic, "PFifo", g + "-" + i, g + "k" + i).setMessageGroup(g).build()));
            }
        }
        long lastSend = System.currentTimeMillis();
        await(45_000, () -> new HashSet<>(bodies(got)).size() >= 18);
        noteArrival(ctx, got, lastSend);
        Thread.sleep(1000);
        List<Got> all = new ArrayList<>(got);
        exactlyOnce(ctx, sent, topic, all);
        checkGroupOrder(ctx, sent, all);
    }

    /** The listener fails a message once: it comes again with delivery attempt 2, then succeeds. */
    static void pushRetry(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        List<Got> got = new CopyOnWriteArrayList<>();
        push(ctx, group, topic, v -> {
            got.add(new Got(v, System.currentTimeMillis()));
            return v.getDeliveryAttempt() == 1 ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
        });
        Producer p = producer(ctx, topic);
        Sent s = send(p, msg(topic, "Retry", "retry-me", "rtkey").addProperty("r", "1").build());
        await(40_000, () -> got.size() >= 2);
        Thread.sleep(1500);
        List<Got> all = new ArrayList<>(got);
        if (!ctx.eq("deliveries", 2, all.size())) {
            return;
        }
        same(ctx, "delivery 1", s, topic, all.get(0).view, 1);
        same(ctx, "delivery 2", s, topic, all.get(1).view, 2);
        long gap = all.get(1).at - all.get(0).at;
        // The group's default retry policy (customized backoff 1s 5s 10s ...) puts the failed
        // message away for 1 s.
        ctx.check(gap >= 1000, "redelivered " + gap + " ms after the failure, before the 1 s backoff");
        ctx.note("redelivered " + gap + " ms after the failed attempt");
    }

    // ---- namespace ----------------------------------------------------------------------------

    /**
     * Producer and SimpleConsumer configured with the same namespace see each other's messages;
     * the message lands in the topic of that bare name (the 5.5.0 proxy does not prefix it).
     */
    static void namespace(Ctx ctx) throws Exception {
        String ns = ctx.name("ns");
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, ns, group, topic);
        Producer p = producerWith(ctx, ns, null, topic);
        Sent s = send(p, msg(topic, "Ns", "namespaced", "nskey").build());
        List<Got> got = receive(c, 1, INVISIBLE, 20_000, true);
        if (ctx.eq("received in the namespace", 1, got.size())) {
            same(ctx, "namespaced", s, topic, got.get(0).view, 1);
        }
        ctx.eq("messages stored in the bare topic " + topic, 1L, ctx.admin.messageCount(topic));
    }

    // ---- errors -------------------------------------------------------------------------------

    /** A send to a topic that does not exist: NotFoundException with TOPIC_NOT_FOUND (40402). */
    static void errorUnknownTopic(Ctx ctx) throws Exception {
        String missing = ctx.name("missing");
        Producer p = producer(ctx);
        try {
            SendReceipt r = p.send(msg(missing, "X", "nowhere").build());
            ctx.fail("send to a missing topic succeeded: " + r.getMessageId());
        } catch (Exception e) {
            ctx.eq("exception class", "NotFoundException", e.getClass().getSimpleName());
            ctx.eq("status code", 40402, code(e));
            ctx.note(Main.chain(e));
        }
        // A producer that names it at start does not start.
        try {
            producer(ctx, missing);
            ctx.fail("a producer naming a missing topic started");
        } catch (Exception e) {
            // The client's start fails with IllegalStateException caused by NotFoundException.
            Throwable cause = e;
            while (cause.getCause() != null && !cause.getClass().getSimpleName().equals("NotFoundException")) {
                cause = cause.getCause();
            }
            ctx.eq("producer start: cause", "NotFoundException", cause.getClass().getSimpleName());
            ctx.eq("producer start: status code", 40402, code(e));
        }
        // A SimpleConsumer subscribing to it does not start.
        try {
            simple(ctx, ctx.name("g"), missing);
            ctx.fail("a SimpleConsumer of a missing topic started");
        } catch (Exception e) {
            ctx.eq("consumer start: status code", 40402, code(e));
        }
        ctx.eq("topic created by the failed send", -1L, ctx.admin.messageCount(missing));
    }

    /**
     * Acks with forged receipt handles. One that does not parse (not the space-separated fields of
     * a pop checkpoint): the proxy answers INTERNAL_SERVER_ERROR (50001). A well-formed one whose
     * retrieve time + invisible time lies in the past (the real handle with those two fields
     * replaced): INVALID_RECEIPT_HANDLE (40013). Then the real handle
     * acks, and the message does not come back.
     */
    static void errorForgedReceiptHandle(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        Producer p = producer(ctx, topic);
        Sent s = send(p, msg(topic, "Forge", "forge", "fkey").build());
        List<Got> got = receive(c, 1, MIN_INVISIBLE, 20_000, false);
        if (!ctx.eq("received", 1, got.size())) {
            return;
        }
        long t0 = got.get(0).at;
        MessageViewImpl v = (MessageViewImpl) got.get(0).view;
        String real = v.getReceiptHandle();
        ctx.note("real handle has " + real.split(" ").length + " space-separated fields");
        v.setReceiptHandle("forged-receipt-handle");
        try {
            c.ack(v);
            ctx.fail("ack with an unparsable receipt handle succeeded");
        } catch (Exception e) {
            ctx.eq("unparsable handle: exception class", "InternalErrorException", e.getClass().getSimpleName());
            ctx.eq("unparsable handle: status code", 50001, code(e));
        }
        String[] f = real.split(" ");
        if (ctx.check(f.length >= 8, "the real receipt handle is not a pop checkpoint: " + real)) {
            f[1] = "1000"; // retrieve time: 1 s after the epoch
            f[2] = "1000"; // invisible time 1 s
            v.setReceiptHandle(String.join(" ", f));
            try {
                c.ack(v);
                ctx.fail("ack with an expired receipt handle succeeded");
            } catch (Exception e) {
                ctx.eq("expired handle: exception class", "BadRequestException", e.getClass().getSimpleName());
                ctx.eq("expired handle: status code", 40013, code(e));
            }
        }
        v.setReceiptHandle(real);
        c.ack(v);
        long wait = t0 + MIN_INVISIBLE.toMillis() + 3000 - System.currentTimeMillis();
        ctx.eq("delivered again after the ack with the real handle", List.of(),
            bodies(drain(c, MIN_INVISIBLE, Math.max(wait, 1000), true)));
        ctx.note("message " + s.id);
    }

    /**
     * A body over 4 MiB (the max body size the server's settings announce) is refused by the
     * client before sending; exactly 4 MiB is stored.
     */
    static void errorOversizeBody(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        Producer p = producer(ctx, topic);
        byte[] big = new byte[4 * 1024 * 1024 + 1];
        Arrays.fill(big, (byte) 'x');
        try {
            SendReceipt r = p.send(Util.PROVIDER.newMessageBuilder().setTopic(topic).setBody(big).build());
            ctx.fail("4 MiB + 1 body sent: " + r.getMessageId());
        } catch (Exception e) {
            ctx.note(Main.chain(e));
            ctx.eq("status code", -1, code(e));
            ctx.check(String.valueOf(e.getMessage()).contains("Message body size exceeds the threshold"),
                "not the client's own size check: " + Main.chain(e));
        }
        ctx.eq("messages stored", 0L, ctx.admin.messageCount(topic));
    }
}
