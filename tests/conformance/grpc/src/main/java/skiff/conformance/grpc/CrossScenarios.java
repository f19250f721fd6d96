package skiff.conformance.grpc;

import static skiff.conformance.grpc.Scenarios.MIN_INVISIBLE;
import static skiff.conformance.grpc.Scenarios.group;
import static skiff.conformance.grpc.Scenarios.same;
import static skiff.conformance.grpc.Scenarios.send;
import static skiff.conformance.grpc.Scenarios.topic;
import static skiff.conformance.grpc.Util.Got;
import static skiff.conformance.grpc.Util.await;
import static skiff.conformance.grpc.Util.bodies;
import static skiff.conformance.grpc.Util.drain;
import static skiff.conformance.grpc.Util.msg;
import static skiff.conformance.grpc.Util.producer;
import static skiff.conformance.grpc.Util.receive;
import static skiff.conformance.grpc.Util.simple;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.body.ConsumerConnection;

/**
 * Cross-protocol scenarios: the 5.x gRPC Java client on one side, the remoting Java client
 * (org.apache.rocketmq:rocketmq-client 5.5.0, DefaultMQProducer / DefaultMQPushConsumer through
 * the name server) on the other, on the same topics and groups of the one broker.
 */
final class CrossScenarios {
    private CrossScenarios() {}

    /** A message a remoting push consumer got, and when. */
    static final class Rcv {
        final MessageExt m;
        final long at;
        final String body;

        Rcv(MessageExt m, long at) {
            this.m = m;
            this.at = at;
            this.body = new String(m.getBody(), StandardCharsets.UTF_8);
        }
    }

    /** User properties of a remoting message: every property that is not a system one. */
    static Map<String, String> userProps(MessageExt m) {
        Map<String, String> out = new TreeMap<>();
        for (Map.Entry<String, String> e : m.getProperties().entrySet()) {
            if (!MessageConst.STRING_HASH_SET.contains(e.getKey())) {
                out.put(e.getKey(), e.getValue());
            }
        }
        return out;
    }

    static List<String> keys(MessageExt m) {
        String k = m.getKeys();
        if (k == null || k.isEmpty()) {
            return List.of();
        }
        return new ArrayList<>(new TreeSet<>(Arrays.asList(k.split(MessageConst.KEY_SEPARATOR))));
    }

    /** What a remoting consumer must see of a message sent with the gRPC client (or remoting). */
    static void sameRemoting(Ctx ctx, String what, Scenarios.Sent s, String topic, MessageExt m) {
        ctx.eq(what + " msgId (UNIQ_KEY)", s.id, m.getMsgId());
        ctx.eq(what + " UNIQ_KEY property", s.id, m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        ctx.eq(what + " topic", topic, m.getTopic());
        ctx.eq(what + " body", s.body, new String(m.getBody(), StandardCharsets.UTF_8));
        ctx.eq(what + " tags", s.tag, m.getTags());
        ctx.eq(what + " keys", s.keys, keys(m));
        ctx.eq(what + " user properties", s.props, userProps(m));
        ctx.eq(what + " reconsumeTimes", 0, m.getReconsumeTimes());
        ctx.check(m.getBornTimestamp() >= s.before - 1000 && m.getBornTimestamp() <= s.after + 1000,
            what + " born timestamp " + m.getBornTimestamp() + " outside the send [" + s.before + ", " + s.after + "]");
        ctx.check(m.getBornHost() != null, what + " has no born host");
    }

    /** A remoting push consumer (started); pop mode: setClientRebalance(false), the group in POP mode. */
    static DefaultMQPushConsumer remotingPush(Ctx ctx, String group, String topic, boolean pop, List<Rcv> got)
        throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ctx.admin.namesrv());
        c.setInstanceName(ctx.name("rc"));
        c.setConsumeThreadMin(2);
        c.setConsumeThreadMax(4);
        c.setPollNameServerInterval(1000);
        c.setHeartbeatBrokerInterval(2000);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        if (pop) {
            c.setClientRebalance(false);
            c.setPopInvisibleTime(MIN_INVISIBLE.toMillis());
            c.setPopBatchNums(4);
        }
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, x) -> {
            long at = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                got.add(new Rcv(m, at));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        ctx.closeLater(c::shutdown);
        c.start();
        return c;
    }

    static DefaultMQProducer remotingProducer(Ctx ctx) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(ctx.name("pg"));
        p.setNamesrvAddr(ctx.admin.namesrv());
        p.setInstanceName(ctx.name("rp"));
        p.setSendMsgTimeout(10_000);
        ctx.closeLater(p::shutdown);
        p.start();
        return p;
    }

    /** DefaultMQProducer.send of one message with a tag, two keys and user properties. */
    static Scenarios.Sent remotingSend(Ctx ctx, DefaultMQProducer p, String topic, String tag, String body,
        List<String> keys, Map<String, String> props) throws Exception {
        org.apache.rocketmq.common.message.Message m = new org.apache.rocketmq.common.message.Message(topic,
            tag, String.join(MessageConst.KEY_SEPARATOR, keys), body.getBytes(StandardCharsets.UTF_8));
        props.forEach(m::putUserProperty);
        long before = System.currentTimeMillis();
        SendResult r = p.send(m);
        long after = System.currentTimeMillis();
        ctx.eq("remoting send status of " + body, SendStatus.SEND_OK, r.getSendStatus());
        return new Scenarios.Sent(r.getMsgId(), body, tag, keys, props, before, after);
    }

    private static String ids(List<Scenarios.Sent> sent) {
        return sent.get(0).id + ".." + sent.get(sent.size() - 1).id;
    }

    // ---- gRPC producer -> remoting push consumer ----------------------------------------------

    /**
     * A gRPC producer sends 8 messages (two tags, two keys each, user properties incl. non-ASCII);
     * a remoting DefaultMQPushConsumer (pull mode, through the name server) consumes each once
     * with its body, tags, keys, user properties and msgId = the gRPC message id (UNIQ_KEY).
     */
    static void grpcToRemotingPush(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        List<Rcv> got = new CopyOnWriteArrayList<>();
        remotingPush(ctx, group, topic, false, got);
        Producer p = producer(ctx, topic);
        List<Scenarios.Sent> sent = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            Message m = msg(topic, i % 2 == 0 ? "TagA" : "TagB", "g2r-" + i + "-ünïcødé", "g2r" + i + "a", "g2r" + i + "b")
                .addProperty("index", String.valueOf(i)).addProperty("city", "Zürich").build();
            sent.add(send(p, m));
        }
        long lastSend = System.currentTimeMillis();
        ctx.note("gRPC ids " + ids(sent));
        await(30_000, () -> new HashSet<>(remotingBodies(got)).size() >= sent.size());
        Thread.sleep(2000); // a duplicate would show
        List<Rcv> all = new ArrayList<>(got);
        noteArrival(ctx, all.stream().mapToLong(r -> r.at).toArray(), lastSend);
        Map<String, Scenarios.Sent> byBody = new HashMap<>();
        for (Scenarios.Sent s : sent) {
            byBody.put(s.body, s);
        }
        Set<String> seen = new HashSet<>();
        for (Rcv r : all) {
            Scenarios.Sent s = byBody.get(r.body);
            if (!ctx.check(s != null, "consumed a message that was not sent: " + r.body)) {
                continue;
            }
            ctx.check(seen.add(r.body), "consumed twice: " + r.body);
            sameRemoting(ctx, r.body, s, topic, r.m);
        }
        ctx.eq("messages consumed", sent.size(), seen.size());
        if (!all.isEmpty()) {
            ctx.note("first as the remoting client sees it: properties " + new TreeMap<>(all.get(0).m.getProperties()));
        }
    }

    private static List<String> remotingBodies(List<Rcv> rs) {
        List<String> out = new ArrayList<>();
        for (Rcv r : rs) {
            out.add(r.body);
        }
        return out;
    }

    private static void noteArrival(Ctx ctx, long[] ats, long lastSend) {
        if (ats.length == 0) {
            return;
        }
        long first = Arrays.stream(ats).min().getAsLong();
        long last = Arrays.stream(ats).max().getAsLong();
        ctx.note("consumed " + (first - lastSend) + ".." + (last - lastSend) + " ms after the last send");
    }

    // ---- remoting producer -> gRPC simple consumer --------------------------------------------

    /**
     * A remoting DefaultMQProducer sends 8 messages (two tags, two keys, user properties incl.
     * non-ASCII); a gRPC SimpleConsumer receives each once with message id = the remoting msgId
     * (UNIQ_KEY), topic, body, tag, keys and user properties, delivery attempt 1, and acks it;
     * nothing comes back after the 10 s invisible duration.
     */
    static void remotingToGrpcSimple(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        SimpleConsumer c = simple(ctx, group, topic);
        DefaultMQProducer p = remotingProducer(ctx);
        List<Scenarios.Sent> sent = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            sent.add(remotingSend(ctx, p, topic, i % 2 == 0 ? "TagA" : "TagB", "r2g-" + i + "-ünïcødé",
                List.of("r2g" + i + "a", "r2g" + i + "b"), Map.of("index", String.valueOf(i), "city", "Zürich")));
        }
        ctx.note("remoting msgIds " + ids(sent));
        long t0 = System.currentTimeMillis();
        List<Got> got = receive(c, sent.size(), MIN_INVISIBLE, 30_000, true);
        Map<String, Scenarios.Sent> ids = new HashMap<>();
        for (Scenarios.Sent s : sent) {
            ids.put(s.id, s);
        }
        Set<String> seen = new HashSet<>();
        for (Got g : got) {
            Scenarios.Sent s = ids.get(g.id());
            if (!ctx.check(s != null, "received a message that was not sent (or with another id): " + g.id() + " " + g.body)) {
                continue;
            }
            ctx.check(seen.add(g.id()), "received twice: " + g.id() + " " + g.body);
            same(ctx, s.body, s, topic, g.view, 1);
        }
        ctx.eq("messages received", sent.size(), seen.size());
        long wait = t0 + MIN_INVISIBLE.toMillis() + 3000 - System.currentTimeMillis();
        List<Got> again = drain(c, MIN_INVISIBLE, Math.max(wait, 1000), true);
        ctx.eq("received again after the ack", List.of(), bodies(again));
    }

    // ---- one group, a remoting and a gRPC member ----------------------------------------------

    /**
     * One group, POP mode for the topic (SET_MESSAGE_REQUEST_MODE), two members at once: a remoting
     * DefaultMQPushConsumer with setClientRebalance(false) (pops all queues, 10 s invisible, 4 per
     * pop) and a gRPC SimpleConsumer (receives 4 at a time, 10 s invisible, works 250 ms on each
     * message, then acks it). 40
     * messages, half from a gRPC producer and half from a remoting producer, 100 ms apart: every
     * message is consumed exactly once across the two members (no loss, no duplicate, none again
     * after the invisible time), each member consumes some, content and id intact on both sides;
     * GET_CONSUMER_CONNECTION_LIST of the group lists both members.
     */
    /**
     * How long the gRPC member of cross_mixed_group works on each message before it acks. Apache
     * wakes one waiting pop per arriving message, the one whose long poll ends first (the broker's
     * PopLongPollingService keeps them ordered by expiry): the gRPC member's polls (5 s) end before
     * the remoting client's (15 s), so a gRPC member that is always polling gets every message and
     * the remoting member none. While the gRPC member works the remoting member's poll is woken.
     */
    static final long WORK_MS = 250;

    static void mixedGroup(Ctx ctx) throws Exception {
        String topic = topic(ctx, "NORMAL");
        String group = group(ctx, false, 16);
        ctx.admin.setPopMode(topic, group);
        List<Rcv> rgot = new CopyOnWriteArrayList<>();
        List<Got> ggot = new CopyOnWriteArrayList<>();
        List<String> gerrors = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer rc = remotingPush(ctx, group, topic, true, rgot);
        SimpleConsumer sc = simple(ctx, group, topic);
        AtomicBoolean stop = new AtomicBoolean();
        Thread gt = new Thread(() -> {
            while (!stop.get()) {
                try {
                    for (MessageView v : sc.receive(4, MIN_INVISIBLE)) {
                        ggot.add(new Got(v, System.currentTimeMillis()));
                        Thread.sleep(WORK_MS); // the member's work: it is not polling meanwhile
                        sc.ack(v);
                    }
                } catch (Exception e) {
                    if (!stop.get()) {
                        gerrors.add(Main.chain(e));
                        try {
                            Thread.sleep(500);
                        } catch (InterruptedException ie) {
                            return;
                        }
                    }
                }
            }
        }, "mixed-grpc-" + ctx.scenario);
        gt.setDaemon(true);
        gt.start();
        ctx.closeLater(() -> {
            stop.set(true);
            gt.join(8000);
        });
        // The remoting member pops once its client has the POP assignment (QUERY_ASSIGNMENT).
        boolean popping = await(20_000, () -> !rc.getDefaultMQPushConsumerImpl().getRebalanceImpl()
            .getPopProcessQueueTable().isEmpty());
        ctx.check(popping, "the remoting consumer got no POP assignment within 20 s; process queues "
            + rc.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet());
        ctx.note("remoting member pops " + rc.getDefaultMQPushConsumerImpl().getRebalanceImpl()
            .getPopProcessQueueTable().keySet());
        Thread.sleep(1000);
        Producer gp = producer(ctx, topic);
        DefaultMQProducer rp = remotingProducer(ctx);
        List<Scenarios.Sent> sent = new ArrayList<>();
        for (int i = 0; i < 40; i++) {
            String body = "mix-" + i + "-ünï";
            if (i % 2 == 0) {
                sent.add(send(gp, msg(topic, "MixG", body, "mk" + i).addProperty("i", String.valueOf(i)).build()));
            } else {
                sent.add(remotingSend(ctx, rp, topic, "MixR", body, List.of("mk" + i), Map.of("i", String.valueOf(i))));
            }
            Thread.sleep(100);
        }
        Set<String> bodiesSent = new HashSet<>();
        for (Scenarios.Sent s : sent) {
            bodiesSent.add(s.body);
        }
        await(40_000, () -> {
            Set<String> u = new HashSet<>(remotingBodies(rgot));
            u.addAll(bodies(ggot));
            return u.containsAll(bodiesSent);
        });
        // Past both invisible durations (10 s) plus the broker's revive time: a message a member
        // did not ack in time would come again.
        long last = Math.max(rgot.stream().mapToLong(r -> r.at).max().orElse(0),
            ggot.stream().mapToLong(g -> g.at).max().orElse(0));
        Thread.sleep(Math.max(1000, last + MIN_INVISIBLE.toMillis() + 8000 - System.currentTimeMillis()));
        stop.set(true);
        List<Rcv> ra = new ArrayList<>(rgot);
        List<Got> ga = new ArrayList<>(ggot);
        ctx.note("remoting member consumed " + ra.size() + ", gRPC member " + ga.size() + " of " + sent.size());
        // GET_CONSUMER_CONNECTION_LIST: the broker knows both members (Apache: the proxy registers
        // the gRPC client with the broker's consumer manager, language JAVA, and as version its
        // own MQVersion.CURRENT_VERSION, 513 for 5.5.0; noted, not checked).
        try {
            ConsumerConnection cc = ctx.admin.consumerConnection(group);
            List<String> conns = new ArrayList<>();
            cc.getConnectionSet().forEach(x -> conns.add(x.getClientId() + " " + x.getLanguage() + " v" + x.getVersion()));
            java.util.Collections.sort(conns);
            ctx.note("GET_CONSUMER_CONNECTION_LIST: " + conns + ", " + cc.getConsumeType() + ", " + cc.getMessageModel()
                + ", subscriptions " + cc.getSubscriptionTable().keySet());
            String remotingId = rc.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId();
            ctx.eq("connections of the group", 2, cc.getConnectionSet().size());
            ctx.check(cc.getConnectionSet().stream().anyMatch(x -> x.getClientId().equals(remotingId)),
                "the remoting member " + remotingId + " is not among the group's connections " + conns);
            ctx.check(cc.getConnectionSet().stream().anyMatch(x -> !x.getClientId().equals(remotingId)
                && x.getLanguage() == org.apache.rocketmq.remoting.protocol.LanguageCode.JAVA),
                "no other JAVA member (the gRPC client) among the group's connections " + conns);
        } catch (Exception e) {
            ctx.fail("GET_CONSUMER_CONNECTION_LIST failed: " + Main.chain(e));
        }
        ctx.eq("gRPC member receive errors", List.of(), gerrors);
        Map<String, Scenarios.Sent> byBody = new HashMap<>();
        for (Scenarios.Sent s : sent) {
            byBody.put(s.body, s);
        }
        Map<String, String> who = new HashMap<>();
        for (Rcv r : ra) {
            Scenarios.Sent s = byBody.get(r.body);
            if (!ctx.check(s != null, "remoting member consumed a message that was not sent: " + r.body)) {
                continue;
            }
            String prev = who.put(r.body, "remoting");
            ctx.check(prev == null, r.body + " consumed twice: by " + prev + " and remoting");
            sameRemoting(ctx, "remoting " + r.body, s, topic, r.m);
        }
        for (Got g : ga) {
            Scenarios.Sent s = byBody.get(g.body);
            if (!ctx.check(s != null, "gRPC member consumed a message that was not sent: " + g.body)) {
                continue;
            }
            String prev = who.put(g.body, "gRPC");
            ctx.check(prev == null, g.body + " consumed twice: by " + prev + " and gRPC");
            same(ctx, "gRPC " + g.body, s, topic, g.view, 1);
        }
        List<String> lost = new ArrayList<>();
        for (Scenarios.Sent s : sent) {
            if (!who.containsKey(s.body)) {
                lost.add(s.body);
            }
        }
        ctx.eq("messages no member consumed", List.of(), lost);
        ctx.check(!ra.isEmpty(), "the remoting member consumed nothing");
        ctx.check(!ga.isEmpty(), "the gRPC member consumed nothing");
    }
}
