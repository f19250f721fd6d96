package skiff.conformance.grpc;

import static skiff.conformance.grpc.Util.PROVIDER;
import static skiff.conformance.grpc.Util.await;
import static skiff.conformance.grpc.Util.code;
import static skiff.conformance.grpc.Util.msg;
import static skiff.conformance.grpc.Util.producer;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.Map;
import java.util.function.Predicate;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.apis.consumer.OffsetOption;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Lite topics (RocketMQ 5.5): a LITE parent topic, a group bound to it (lite.bind.topic), lite push
 * consumers subscribing lite topics one by one. Apache serves them in cluster mode only (a broker
 * with enableLmq and enableMultiDispatch behind a proxy in cluster mode).
 */
final class LiteScenarios {
    private LiteScenarios() {
    }

    /** What one lite consumer received: "liteTopic:body", in arrival order. */
    static final class Received {
        final List<String> all = new CopyOnWriteArrayList<>();

        List<String> of(String lite) {
            List<String> out = new ArrayList<>();
            for (String s : all) {
                if (s.startsWith(lite + ":")) {
                    out.add(s.substring(lite.length() + 1));
                }
            }
            return out;
        }
    }

    static String parent(Ctx ctx) throws Exception {
        String topic = ctx.name("lt");
        ctx.admin.createTopic(topic, "LITE");
        return topic;
    }

    static String liteGroup(Ctx ctx, String parent, String model, String... more) throws Exception {
        String group = ctx.name("lg");
        ctx.admin.createLiteGroup(group, parent, model, more);
        return group;
    }

    static LitePushConsumer consumer(Ctx ctx, String group, String parent, Received got) throws ClientException {
        return consumer(ctx, group, parent, got, ctx.config());
    }

    static LitePushConsumer consumer(Ctx ctx, String group, String parent, Received got, ClientConfiguration config)
        throws ClientException {
        LitePushConsumer c = PROVIDER.newLitePushConsumerBuilder()
            .setClientConfiguration(config)
            .setConsumerGroup(group)
            .bindTopic(parent)
            .setMessageListener(v -> {
                got.all.add(v.getLiteTopic().orElse("?") + ":" + Util.body(v));
                return ConsumeResult.SUCCESS;
            })
            .build();
        ctx.closeLater(c);
        return c;
    }

    static List<String> sorted(List<String> in) {
        List<String> out = new ArrayList<>(in);
        java.util.Collections.sort(out);
        return out;
    }

    static void send(Producer p, String parent, String lite, String body) throws ClientException {
        p.send(msg(parent, "Lite", body).setLiteTopic(lite).build());
    }

    /**
     * Subscribe, receive, unsubscribe: a subscribed lite topic's messages arrive (each once; the
     * listener runs on several threads, so not necessarily in send order), a lite topic nobody
     * subscribes is not delivered until it is subscribed (then from its start), and nothing sent
     * after unsubscribing arrives.
     */
    static void liteSubscribeReceive(Ctx ctx) throws Exception {
        String parent = parent(ctx);
        String group = liteGroup(ctx, parent, "Shared");
        Received got = new Received();
        LitePushConsumer c = consumer(ctx, group, parent, got);
        c.subscribeLite("chat-1");
        Producer p = producer(ctx, parent);
        for (int i = 0; i < 3; i++) {
            send(p, parent, "chat-1", "one-" + i);
        }
        send(p, parent, "chat-2", "two-0");
        await(20_000, () -> got.of("chat-1").size() >= 3);
        // Two seconds more: a message of chat-2 would have come with them.
        Thread.sleep(2000);
        ctx.eq("chat-1", List.of("one-0", "one-1", "one-2"), sorted(got.of("chat-1")));
        ctx.note("chat-1 consumed in the order " + got.of("chat-1"));
        ctx.eq("chat-2 before it is subscribed", List.of(), got.of("chat-2"));
        c.unsubscribeLite("chat-1");
        send(p, parent, "chat-1", "one-late");
        c.subscribeLite("chat-2");
        await(20_000, () -> got.of("chat-2").size() >= 1);
        Thread.sleep(2000);
        ctx.eq("chat-2 after it is subscribed", List.of("two-0"), got.of("chat-2"));
        ctx.eq("chat-1 after it is unsubscribed", List.of("one-0", "one-1", "one-2"), sorted(got.of("chat-1")));
    }

    /** subscribeLite with MAX_OFFSET skips what the lite topic already holds. */
    static void liteOffsetMax(Ctx ctx) throws Exception {
        String parent = parent(ctx);
        String group = liteGroup(ctx, parent, "Shared");
        Producer p = producer(ctx, parent);
        send(p, parent, "late-joiner", "before");
        Received got = new Received();
        LitePushConsumer c = consumer(ctx, group, parent, got);
        c.subscribeLite("late-joiner", OffsetOption.MAX_OFFSET);
        send(p, parent, "late-joiner", "after");
        await(20_000, () -> !got.of("late-joiner").isEmpty());
        Thread.sleep(2000);
        ctx.eq("received after a MAX_OFFSET subscription", List.of("after"), got.of("late-joiner"));
    }

    /** A lite topic name of 65 characters, or with a dot, is refused with ILLEGAL_LITE_TOPIC. */
    static void liteIllegalName(Ctx ctx) throws Exception {
        String parent = parent(ctx);
        Producer p = producer(ctx, parent);
        for (String bad : new String[] {"x".repeat(65), "bad.name"}) {
            try {
                send(p, parent, bad, "never");
                ctx.fail("a send to lite topic " + bad + " succeeded");
            } catch (ClientException e) {
                ctx.eq("send to lite topic " + bad + ": status code", 40020, code(e));
            }
        }
    }

    /**
     * The group's lite.sub.client.quota reaches the client in its settings: with a quota of 1 the
     * client refuses a second subscribeLite itself (LiteSubscriptionQuotaExceededException).
     */
    static void liteQuota(Ctx ctx) throws Exception {
        String parent = parent(ctx);
        String group = liteGroup(ctx, parent, "Shared", "lite.sub.client.quota", "1");
        LitePushConsumer c = consumer(ctx, group, parent, new Received());
        c.subscribeLite("first");
        try {
            c.subscribeLite("second");
            ctx.fail("a second lite subscription within a quota of 1 succeeded");
        } catch (ClientException e) {
            ctx.eq("refusal", "LiteSubscriptionQuotaExceededException", e.getClass().getSimpleName());
        }
        ctx.eq("lite topics held", java.util.Set.of("first"), c.getLiteTopicSet());
    }

    /**
     * Exclusive: the second client of the group to subscribe a lite topic takes it, the first is
     * told to drop it (NotifyUnsubscribeLiteCommand), and the lite topic's messages go to the second.
     */
    static void liteExclusive(Ctx ctx) throws Exception {
        String parent = parent(ctx);
        String group = liteGroup(ctx, parent, "Exclusive");
        Received first = new Received();
        Received second = new Received();
        LitePushConsumer a = consumer(ctx, group, parent, first);
        LitePushConsumer b = consumer(ctx, group, parent, second);
        a.subscribeLite("solo");
        b.subscribeLite("solo");
        boolean dropped = await(10_000, () -> !a.getLiteTopicSet().contains("solo"));
        ctx.check(dropped, "the first client still holds the lite topic: " + a.getLiteTopicSet());
        Producer p = producer(ctx, parent);
        send(p, parent, "solo", "only-b");
        await(20_000, () -> !second.of("solo").isEmpty());
        Thread.sleep(2000);
        ctx.eq("the second client's", List.of("only-b"), second.of("solo"));
        ctx.eq("the first client's", List.of(), first.of("solo"));
    }

    /**
     * DLQ: a lite message its listener keeps failing, in a group with retryMaxTimes 1, is
     * delivered twice (attempts 1 and 2), then lands in %DLQ%group with its body and is not
     * delivered again. The redelivery comes about a minute after the client's nack, and the
     * move to the DLQ at the pop after that, on both brokers: the scenario waits up to 200 s.
     */
    static void liteDlq(Ctx ctx) throws Exception {
        String parent = parent(ctx);
        String group = ctx.name("lg");
        ctx.admin.createLiteGroup(group, parent, "Shared", 1);
        List<String> attempts = new CopyOnWriteArrayList<>();
        List<Long> at = new CopyOnWriteArrayList<>();
        long t0 = System.currentTimeMillis();
        LitePushConsumer c = PROVIDER.newLitePushConsumerBuilder()
            .setClientConfiguration(ctx.config())
            .setConsumerGroup(group)
            .bindTopic(parent)
            .setMessageListener(v -> {
                attempts.add(v.getLiteTopic().orElse("?") + ":" + Util.body(v) + ":" + v.getDeliveryAttempt());
                at.add((System.currentTimeMillis() - t0) / 1000);
                return ConsumeResult.FAILURE;
            })
            .build();
        ctx.closeLater(c);
        c.subscribeLite("doomed");
        Producer p = producer(ctx, parent);
        send(p, parent, "doomed", "to-the-dlq");
        String dlq = "%DLQ%" + group;
        List<MessageExt> inDlq = ctx.admin.readAll(dlq, 1, 200_000);
        ctx.note("delivered at " + at + " s after the consumer started; in " + dlq + " after "
            + (System.currentTimeMillis() - t0) / 1000 + " s");
        // Three seconds more: a third delivery would come by then.
        Thread.sleep(3000);
        ctx.eq("deliveries", List.of("doomed:to-the-dlq:1", "doomed:to-the-dlq:2"), attempts);
        if (!ctx.eq("messages in " + dlq, 1, inDlq.size())) {
            return;
        }
        MessageExt d = inDlq.get(0);
        ctx.eq("DLQ body", "to-the-dlq", new String(d.getBody(), java.nio.charset.StandardCharsets.UTF_8));
        ctx.note("DLQ message properties " + d.getProperties());
    }

    /**
     * Polls GET_LITE_TOPIC_INFO every half second until {@code done} holds or {@code timeoutMs}
     * passes; answers the last state seen.
     */
    static Admin.LiteTopicState awaitLite(Ctx ctx, String parent, String lite, long timeoutMs,
        Predicate<Admin.LiteTopicState> done) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        Admin.LiteTopicState state = ctx.admin.liteTopic(parent, lite);
        while (!done.test(state) && System.currentTimeMillis() < deadline) {
            Thread.sleep(500);
            state = ctx.admin.liteTopic(parent, lite);
        }
        return state;
    }

    /**
     * Subscription expiry (both brokers run with a 45 s expiry here, RocketMQ's
     * liteSubscriptionCheckTimeoutMills, 3 minutes by default): a client whose network goes
     * silent (through a relay cut off after its first message) stops refreshing its lite
     * subscription and loses it about 45 s after it subscribed; a live client, which refreshes
     * its whole set every 30 s, keeps its own past that time and still receives.
     */
    static void liteSubscriptionExpiry(Ctx ctx) throws Exception {
        String parent = parent(ctx);
        String group = liteGroup(ctx, parent, "Shared");
        Producer p = producer(ctx, parent);
        // A message in each lite topic first: Apache also drops lite topics that stay empty.
        send(p, parent, "hung", "hung-0");
        send(p, parent, "alive", "alive-0");
        WireRelay relay = new WireRelay(ctx.endpoint, null);
        ClientConfiguration throughRelay = Ctx.config(relay.endpoint(), false, null);
        Received hungGot = new Received();
        Received aliveGot = new Received();
        LitePushConsumer hung = consumer(ctx, group, parent, hungGot, throughRelay);
        // Closed before the client, whose close would wait for the calls the cut left open.
        ctx.closeLater(relay);
        LitePushConsumer alive = consumer(ctx, group, parent, aliveGot);
        alive.subscribeLite("alive");
        hung.subscribeLite("hung");
        long subscribedAt = System.currentTimeMillis();
        boolean both = await(20_000, () -> !hungGot.of("hung").isEmpty() && !aliveGot.of("alive").isEmpty());
        if (!ctx.check(both, "first messages: hung " + hungGot.all + ", alive " + aliveGot.all)) {
            return;
        }
        relay.cutOff();
        ctx.eq("subscribers of hung right after the cut", 1, ctx.admin.liteTopic(parent, "hung").subscribers().size());
        Admin.LiteTopicState gone = awaitLite(ctx, parent, "hung", 90_000, s -> s.subscribers().isEmpty());
        long after = System.currentTimeMillis() - subscribedAt;
        ctx.note("the silent client's subscription was gone " + after / 1000 + " s after it subscribed");
        ctx.check(gone.subscribers().isEmpty(), "hung still subscribed 90 s after its client went silent: "
            + gone.subscribers());
        ctx.check(after >= 40_000 && after <= 60_000,
            "the silent client's subscription went " + after + " ms after it subscribed, expected 45 s and a check");
        ctx.eq("subscribers of alive then", 1, ctx.admin.liteTopic(parent, "alive").subscribers().size());
        send(p, parent, "alive", "alive-1");
        await(20_000, () -> aliveGot.of("alive").size() >= 2);
        ctx.eq("alive received", List.of("alive-0", "alive-1"), aliveGot.of("alive"));
        ctx.eq("hung received", List.of("hung-0"), hungGot.of("hung"));
    }

    /**
     * TTL expiry (a parent with lite.topic.expiration 1 minute; both brokers check every 5 s, with
     * RocketMQ's 15-minute floor, minLiteTTl, lowered to 10 s): a lite topic idle for its TTL is
     * deleted with the group's offset in it, though a client still subscribes it; the next
     * message starts it again at offset 0 and reaches that client (whose refresh every 30 s
     * subscribes it again), which it would not if the group's old offset had stayed.
     */
    static void liteTtlExpiry(Ctx ctx) throws Exception {
        String parent = ctx.name("lt");
        ctx.admin.createTopic(parent, "LITE", 4, Map.of("lite.topic.expiration", "1"));
        String group = liteGroup(ctx, parent, "Shared");
        Received got = new Received();
        LitePushConsumer c = consumer(ctx, group, parent, got);
        c.subscribeLite("fleeting");
        Producer p = producer(ctx, parent);
        send(p, parent, "fleeting", "first");
        long sentAt = System.currentTimeMillis();
        await(20_000, () -> !got.of("fleeting").isEmpty());
        ctx.eq("next offset of fleeting after one message", 1L, ctx.admin.liteTopic(parent, "fleeting").nextOffset());
        Admin.LiteTopicState gone = awaitLite(ctx, parent, "fleeting", 120_000, s -> s.nextOffset() == 0);
        long after = System.currentTimeMillis() - sentAt;
        ctx.note("fleeting expired " + after / 1000 + " s after its message");
        if (!ctx.eq("next offset of fleeting once expired", 0L, gone.nextOffset())) {
            return;
        }
        ctx.check(after >= 58_000 && after <= 90_000,
            "fleeting expired " + after + " ms after its message, expected its 60 s TTL and a check");
        send(p, parent, "fleeting", "second");
        await(45_000, () -> got.of("fleeting").size() >= 2);
        ctx.eq("fleeting received", List.of("first", "second"), got.of("fleeting"));
        ctx.eq("next offset of fleeting after its new message", 1L,
            ctx.admin.liteTopic(parent, "fleeting").nextOffset());
    }
}
