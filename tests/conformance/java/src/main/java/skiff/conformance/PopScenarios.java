package skiff.conformance;

import static skiff.conformance.Util.await;
import static skiff.conformance.Util.msg;
import static skiff.conformance.Util.props;
import static skiff.conformance.Util.str;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;
import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.AckStatus;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.PopStatus;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.impl.consumer.PullResultExt;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.constant.ConsumeInitMode;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.filter.ExpressionType;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.sysflag.PullSysFlag;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.message.MessageQueueAssignment;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ChangeInvisibleTimeRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.NotificationRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.NotificationResponseHeader;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;

/**
 * POP consumption (RocketMQ 5): POP_MESSAGE 200050, ACK_MESSAGE 200051, BATCH_ACK_MESSAGE 200151,
 * CHANGE_MESSAGE_INVISIBLETIME 200053, NOTIFICATION 200054, QUERY_ASSIGNMENT 400 and
 * SET_MESSAGE_REQUEST_MODE 401, through the 5.5.0 client's push consumer in pop mode and through
 * its MQClientAPIImpl directly (what the 5.x proxy does for gRPC consumers).
 *
 * <p>The 4.9.8 client has none of these classes: pom-4.9.8.xml leaves this file out, and
 * {@link Scenarios} reaches these methods by name.
 *
 * <p>Timing facts of the Apache broker these scenarios rely on only as lower bounds: a message
 * popped and not acked comes back no earlier than its invisible time after the pop (the revive
 * service re-puts it into the group's pop retry topic only once that time has passed); every other
 * wait is an await with a deadline.
 */
final class PopScenarios {
    private PopScenarios() {}

    /** Header value Apache gives orderly pops as reviveQid (KeyBuilder.POP_ORDER_REVIVE_QUEUE). */
    static final int ORDER_REVIVE_QID = 999;

    // ---- the client's connection, with every request and response kept -----------------------

    /** An RPC hook that keeps the last request and response per request code, and counts requests. */
    static final class Capture implements RPCHook {
        final RPCHook inner;
        final Map<Integer, RemotingCommand> lastResponse = new ConcurrentHashMap<>();
        final Map<Integer, Map<String, String>> firstRequest = new ConcurrentHashMap<>();
        final Map<Integer, AtomicInteger> sent = new ConcurrentHashMap<>();

        Capture(RPCHook inner) {
            this.inner = inner;
        }

        @Override
        public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
            try {
                request.makeCustomHeaderToNet(); // header fields into extFields, as encode() does
            } catch (RuntimeException e) {
                // the header stays unrecorded; the request is sent as usual
            }
            sent.computeIfAbsent(request.getCode(), k -> new AtomicInteger()).incrementAndGet();
            if (request.getExtFields() != null) {
                firstRequest.putIfAbsent(request.getCode(), new TreeMap<>(request.getExtFields()));
            }
            if (inner != null) {
                inner.doBeforeRequest(remoteAddr, request);
            }
        }

        @Override
        public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
            if (response != null) {
                lastResponse.put(request.getCode(), response);
            }
            if (inner != null) {
                inner.doAfterResponse(remoteAddr, request, response);
            }
        }

        int count(int code) {
            AtomicInteger n = sent.get(code);
            return n == null ? 0 : n.get();
        }

        /** The codes sent, with counts, for the observations. */
        String codes() {
            return new TreeMap<>(sent).toString();
        }
    }

    /** One broker as the scenarios reach it: a started producer, its MQClientAPIImpl, the address. */
    static final class Broker {
        final Ctx ctx;
        final DefaultMQProducer p;
        final MQClientInstance client;
        final MQClientAPIImpl api;
        final Capture cap;
        String name;
        String addr;

        Broker(Ctx ctx, DefaultMQProducer p, Capture cap) {
            this.ctx = ctx;
            this.p = p;
            this.cap = cap;
            this.client = p.getDefaultMQProducerImpl().getMqClientFactory();
            this.api = client.getMQClientAPIImpl();
        }

        RemotingCommand last(int code) {
            return cap.lastResponse.get(code);
        }

        MessageQueue queue(String topic, int queueId) {
            return new MessageQueue(topic, name, queueId);
        }

        /** UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), as {@code mqadmin updateSubGroup} sends it. */
        void createGroup(String group, Integer retryMaxTimes) throws Exception {
            SubscriptionGroupConfig g = new SubscriptionGroupConfig();
            g.setGroupName(group);
            if (retryMaxTimes != null) {
                g.setRetryMaxTimes(retryMaxTimes);
            }
            api.createSubscriptionGroup(addr, g, 5000);
        }

        /** POP_MESSAGE through the client's popMessageAsync; the raw response is {@code last(POP_MESSAGE)}. */
        PopResult pop(String group, String topic, int queueId, int max, long invisibleMs, long pollMs, boolean order)
            throws Exception {
            PopMessageRequestHeader h = new PopMessageRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(topic);
            h.setQueueId(queueId);
            h.setMaxMsgNums(max);
            h.setInvisibleTime(invisibleMs);
            h.setPollTime(pollMs);
            h.setBornTime(System.currentTimeMillis());
            h.setInitMode(ConsumeInitMode.MIN);
            h.setExpType(ExpressionType.TAG);
            h.setExp("*");
            h.setOrder(order);
            CompletableFuture<PopResult> f = new CompletableFuture<>();
            api.popMessageAsync(name, addr, h, pollMs + 10_000, new PopCallback() {
                @Override
                public void onSuccess(PopResult r) {
                    f.complete(r);
                }

                @Override
                public void onException(Throwable e) {
                    f.completeExceptionally(e);
                }
            });
            return f.get(pollMs + 15_000, TimeUnit.MILLISECONDS);
        }

        /** ACK_MESSAGE for a popped message, the header built from its POP_CK as the push consumer does. */
        AckResult ack(String group, String topic, MessageExt m) throws Exception {
            String ck = m.getProperty(MessageConst.PROPERTY_POP_CK);
            String[] x = ExtraInfoUtil.split(ck);
            AckMessageRequestHeader h = new AckMessageRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(ExtraInfoUtil.getRealTopic(x, topic, group));
            h.setQueueId(ExtraInfoUtil.getQueueId(x));
            h.setOffset(ExtraInfoUtil.getQueueOffset(x));
            h.setExtraInfo(ck);
            CompletableFuture<AckResult> f = new CompletableFuture<>();
            api.ackMessageAsync(addr, 10_000, callback(f), h);
            return f.get(15, TimeUnit.SECONDS);
        }

        /** BATCH_ACK_MESSAGE of several popped messages (the client merges them per checkpoint). */
        AckResult batchAck(String group, String topic, List<MessageExt> ms) throws Exception {
            List<String> cks = ms.stream().map(m -> m.getProperty(MessageConst.PROPERTY_POP_CK)).collect(Collectors.toList());
            CompletableFuture<AckResult> f = new CompletableFuture<>();
            api.batchAckMessageAsync(addr, 10_000, callback(f), topic, group, cks);
            return f.get(15, TimeUnit.SECONDS);
        }

        /** CHANGE_MESSAGE_INVISIBLETIME, the header built from POP_CK as the push consumer does. */
        AckResult changeInvisible(String group, String topic, MessageExt m, long invisibleMs) throws Exception {
            String ck = m.getProperty(MessageConst.PROPERTY_POP_CK);
            String[] x = ExtraInfoUtil.split(ck);
            ChangeInvisibleTimeRequestHeader h = new ChangeInvisibleTimeRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(ExtraInfoUtil.getRealTopic(x, topic, group));
            h.setQueueId(ExtraInfoUtil.getQueueId(x));
            h.setOffset(ExtraInfoUtil.getQueueOffset(x));
            h.setExtraInfo(ck);
            h.setInvisibleTime(invisibleMs);
            CompletableFuture<AckResult> f = new CompletableFuture<>();
            api.changeInvisibleTimeAsync(name, addr, h, 10_000, callback(f));
            return f.get(15, TimeUnit.SECONDS);
        }

        /** NOTIFICATION (200054): the broker's hasMsg answer, long-polled up to pollMs. */
        NotificationResponseHeader notification(String group, String topic, int queueId, long pollMs) throws Exception {
            NotificationRequestHeader h = new NotificationRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(topic);
            h.setQueueId(queueId);
            h.setPollTime(pollMs);
            h.setBornTime(System.currentTimeMillis());
            RemotingCommand req = RemotingCommand.createRequestCommand(RequestCode.NOTIFICATION, h);
            RemotingCommand resp = api.getRemotingClient().invokeSync(addr, req, pollMs + 10_000);
            if (resp.getCode() != ResponseCode.SUCCESS) {
                throw new IllegalStateException("NOTIFICATION answered code " + resp.getCode() + " " + resp.getRemark());
            }
            return (NotificationResponseHeader) resp.decodeCommandCustomHeader(NotificationResponseHeader.class);
        }

        /**
         * PULL_MESSAGE (11) of one queue from offset 0, straight to the broker's address: the pop
         * retry topic and the DLQ are created by the broker and reach the name server only with its
         * next registration (up to 30 s later), so a route lookup would not find them yet. A
         * refused pull (no such topic) reads as no messages; its code is noted.
         */
        List<MessageExt> pullDirect(String topic, int queueId, int expected, long timeoutMs) throws Exception {
            String reader = ctx.name("reader");
            List<MessageExt> out = new ArrayList<>();
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (true) {
                out.clear();
                PullMessageRequestHeader h = new PullMessageRequestHeader();
                h.setConsumerGroup(reader);
                h.setTopic(topic);
                h.setQueueId(queueId);
                h.setQueueOffset(0L);
                h.setMaxMsgNums(32);
                h.setSysFlag(PullSysFlag.buildSysFlag(false, false, true, false)); // subscription in the request
                h.setCommitOffset(0L);
                h.setSuspendTimeoutMillis(0L);
                h.setSubscription("*");
                h.setSubVersion(0L);
                h.setExpressionType(ExpressionType.TAG);
                try {
                    PullResult r = api.pullMessage(addr, h, 10_000, CommunicationMode.SYNC, null);
                    if (r.getPullStatus() == PullStatus.FOUND) {
                        out.addAll(MessageDecoder.decodesBatch(ByteBuffer.wrap(((PullResultExt) r).getMessageBinary()),
                            true, true, true));
                    }
                } catch (MQBrokerException e) {
                    if (System.currentTimeMillis() > deadline) {
                        ctx.note("PULL_MESSAGE of " + topic + " refused: code " + e.getResponseCode());
                    }
                }
                if (out.size() >= expected || System.currentTimeMillis() > deadline) {
                    return out;
                }
                Thread.sleep(300);
            }
        }

        SendResult sendTo(String topic, int queueId, Message m) throws Exception {
            return p.send(m, queue(topic, queueId));
        }

        /** Waits until the queue's max offset reaches n, so a pop finds every message sent. */
        boolean awaitStored(String topic, int queueId, long n) throws Exception {
            return await(10_000, () -> {
                try {
                    return p.maxOffset(queue(topic, queueId)) >= n;
                } catch (Exception e) {
                    return false;
                }
            });
        }
    }

    static AckCallback callback(CompletableFuture<AckResult> f) {
        return new AckCallback() {
            @Override
            public void onSuccess(AckResult r) {
                f.complete(r);
            }

            @Override
            public void onException(Throwable e) {
                f.completeExceptionally(e);
            }
        };
    }

    /**
     * A producer (with a {@link Capture} hook) for the scenario, and the topic created on the broker
     * with {@code queues} queues by the client's createTopic (UPDATE_AND_CREATE_TOPIC), routed.
     */
    static Broker broker(Ctx ctx, String topic, int queues) throws Exception {
        Capture cap = new Capture(WireLog.forScenario(ctx.scenario));
        DefaultMQProducer p = new DefaultMQProducer(ctx.name("pg"), cap);
        p.setNamesrvAddr(ctx.namesrv);
        p.setInstanceName(Util.instance());
        p.setSendMsgTimeout(10_000);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        ctx.closeLater(p::shutdown);
        Broker b = new Broker(ctx, p, cap);
        Util.createTopic(p, p.getCreateTopicKey(), topic, queues);
        List<MessageQueue> mqs = new ArrayList<>();
        boolean routed = await(20_000, () -> {
            try {
                mqs.clear();
                mqs.addAll(p.fetchPublishMessageQueues(topic));
                return mqs.size() >= queues;
            } catch (Exception e) {
                return false;
            }
        });
        if (!routed) {
            throw new IllegalStateException("topic " + topic + " not routed with " + queues + " queues within 20 s: " + mqs);
        }
        b.name = mqs.get(0).getBrokerName();
        // fetchPublishMessageQueues leaves the client's broker address table alone; a null
        // address would send the admin requests below to the name server
        b.client.updateTopicRouteInfoFromNameServer(topic);
        b.addr = b.client.findBrokerAddressInPublish(b.name);
        if (b.addr == null) {
            throw new IllegalStateException("no address for broker " + b.name);
        }
        return b;
    }

    /** POP_CK = ckQueueOffset popTime invisibleTime reviveQid topicFlag brokerName queueId msgQueueOffset. */
    static String[] ck(MessageExt m) {
        String ck = m.getProperty(MessageConst.PROPERTY_POP_CK);
        return ck == null ? new String[0] : ck.split(MessageConst.KEY_SEPARATOR);
    }

    static String hdr(RemotingCommand r, String field) {
        return r == null || r.getExtFields() == null ? null : r.getExtFields().get(field);
    }

    /** code, remark and header fields of a raw response, for the observations. */
    static String shape(RemotingCommand r) {
        if (r == null) {
            return "none";
        }
        return "code=" + r.getCode() + (r.getRemark() == null ? "" : " remark=" + r.getRemark())
            + " " + (r.getExtFields() == null ? "{}" : new TreeMap<>(r.getExtFields()));
    }

    /**
     * Checks a non-empty pop answer against what a client depends on: popTime between the request
     * and the answer, invisibleTime as asked, the POP_CK the client built from the header naming
     * the message's own queue and offset, the same popTime/invisibleTime/reviveQid, the broker and
     * the retry flag.
     */
    static void checkPopAnswer(Ctx ctx, Broker b, String what, PopResult r, long t0, long t1, long invisibleMs,
        String flag, boolean order) {
        RemotingCommand raw = b.last(RequestCode.POP_MESSAGE);
        ctx.eq(what + ": response code", ResponseCode.SUCCESS, raw == null ? null : raw.getCode());
        ctx.check(r.getPopTime() >= t0 && r.getPopTime() <= t1,
            what + ": popTime " + r.getPopTime() + " not within the request's [" + t0 + ", " + t1 + "]");
        ctx.eq(what + ": invisibleTime", invisibleMs, r.getInvisibleTime());
        String reviveQid = hdr(raw, "reviveQid");
        if (order) {
            ctx.eq(what + ": reviveQid of an orderly pop", String.valueOf(ORDER_REVIVE_QID), reviveQid);
        } else {
            ctx.check(reviveQid != null && Integer.parseInt(reviveQid) >= 0 && Integer.parseInt(reviveQid) != ORDER_REVIVE_QID,
                what + ": reviveQid " + reviveQid);
        }
        ctx.check(hdr(raw, "startOffsetInfo") != null && hdr(raw, "msgOffsetInfo") != null,
            what + ": no startOffsetInfo/msgOffsetInfo in " + shape(raw));
        for (MessageExt m : r.getMsgFoundList()) {
            String[] x = ck(m);
            String body = str(m.getBody());
            if (!ctx.check(x.length == 8, what + ": POP_CK of " + body + " is " + Arrays.toString(x))) {
                continue;
            }
            ctx.eq(what + ": POP_CK popTime of " + body, String.valueOf(r.getPopTime()), x[1]);
            ctx.eq(what + ": POP_CK invisibleTime of " + body, String.valueOf(invisibleMs), x[2]);
            ctx.eq(what + ": POP_CK reviveQid of " + body, reviveQid, x[3]);
            ctx.eq(what + ": POP_CK topic flag of " + body + " (0 topic, 1 retry v1, 2 retry v2)", flag, x[4]);
            ctx.eq(what + ": POP_CK broker of " + body, b.name, x[5]);
            ctx.eq(what + ": POP_CK queue of " + body, String.valueOf(m.getQueueId()), x[6]);
            ctx.eq(what + ": POP_CK offset of " + body, String.valueOf(m.getQueueOffset()), x[7]);
            ctx.check(Long.parseLong(x[0]) <= m.getQueueOffset(),
                what + ": checkpoint start offset " + x[0] + " after the message's " + m.getQueueOffset());
        }
    }

    static Map<String, MessageExt> byBody(List<MessageExt> ms) {
        Map<String, MessageExt> out = new TreeMap<>();
        for (MessageExt m : ms) {
            out.put(str(m.getBody()), m);
        }
        return out;
    }

    static List<MessageExt> found(PopResult r) {
        return r.getPopStatus() == PopStatus.FOUND && r.getMsgFoundList() != null ? r.getMsgFoundList() : Collections.emptyList();
    }

    /**
     * A push consumer in pop mode (setClientRebalance(false)), its requests counted by {@code cap}.
     * The context shuts it down.
     */
    static DefaultMQPushConsumer popConsumer(Ctx ctx, String group, Capture cap) {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, cap, new AllocateMessageQueueAveragely());
        c.setNamesrvAddr(ctx.namesrv);
        c.setInstanceName(Util.instance());
        c.setConsumeThreadMin(2);
        c.setConsumeThreadMax(4);
        c.setPollNameServerInterval(1000);
        c.setClientRebalance(false);
        c.setPopInvisibleTime(5000); // the client's minimum
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET); // pop initMode MIN
        ctx.closeLater(c::shutdown);
        return c;
    }

    /** QUERY_ASSIGNMENT as the consumer's own client sends it, until the broker assigns something. */
    static Set<MessageQueueAssignment> awaitAssignment(Ctx ctx, Broker b, DefaultMQPushConsumer c, String topic,
        String group) throws Exception {
        MQClientInstance ci = c.getDefaultMQPushConsumerImpl().getmQClientFactory();
        List<Set<MessageQueueAssignment>> last = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        await(20_000, () -> {
            try {
                Set<MessageQueueAssignment> a = ci.getMQClientAPIImpl().queryAssignment(b.addr, topic, group,
                    ci.getClientId(), new AllocateMessageQueueAveragely().getName(), MessageModel.CLUSTERING, 5000);
                last.clear();
                last.add(a);
                return a != null && !a.isEmpty();
            } catch (Exception e) {
                errors.add(String.valueOf(e));
                return false;
            }
        });
        if (last.isEmpty()) {
            ctx.fail("QUERY_ASSIGNMENT of " + topic + " never answered: " + errors);
            return Collections.emptySet();
        }
        return last.get(0) == null ? Collections.emptySet() : last.get(0);
    }

    static String assignments(Set<MessageQueueAssignment> as) {
        return as.stream().map(a -> a.getMessageQueue().getBrokerName() + "/" + a.getMessageQueue().getQueueId() + ":" + a.getMode())
            .sorted().collect(Collectors.toList()).toString();
    }

    // ---- 1. push consumer in pop mode --------------------------------------------------------

    /**
     * SET_MESSAGE_REQUEST_MODE POP for (topic, group); QUERY_ASSIGNMENT answers POP assignments;
     * a push consumer with setClientRebalance(false) pops 20 messages, each once and as sent, acks
     * them, and nothing comes again after the invisible time has passed.
     */
    static void pushConsume(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        Broker b = broker(ctx, topic, 4);
        b.createGroup(group, null);
        b.api.setMessageRequestMode(b.addr, topic, group, MessageRequestMode.POP, 0, 5000);

        List<Message> sent = new ArrayList<>();
        Map<String, SendResult> results = new HashMap<>();
        for (int i = 0; i < 20; i++) {
            sent.add(msg(topic, i % 2 == 0 ? "TagA" : "TagB", "pop-key-" + i, "pop-" + i, props("i", String.valueOf(i))));
        }
        for (int i = 0; i < 10; i++) { // half before the consumer starts (initMode MIN finds them)
            results.put(str(sent.get(i).getBody()), b.p.send(sent.get(i)));
        }
        Capture cc = new Capture(WireLog.forScenario(ctx.scenario));
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = popConsumer(ctx, group, cc);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, x) -> {
            msgs.forEach(m -> got.add(m, "c"));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        Set<MessageQueueAssignment> as = awaitAssignment(ctx, b, c, topic, group);
        ctx.note("QUERY_ASSIGNMENT " + topic + " -> " + assignments(as));
        ctx.check(!as.isEmpty(), "no assignment for " + topic);
        for (MessageQueueAssignment a : as) {
            ctx.eq("assignment mode of " + a.getMessageQueue(), MessageRequestMode.POP, a.getMode());
            ctx.eq("assignment topic", topic, a.getMessageQueue().getTopic());
        }
        Set<MessageQueueAssignment> retryAs = awaitAssignment(ctx, b, c, "%RETRY%" + group, group);
        ctx.note("QUERY_ASSIGNMENT %RETRY%group -> " + assignments(retryAs));
        for (int i = 10; i < 20; i++) {
            results.put(str(sent.get(i).getBody()), b.p.send(sent.get(i)));
        }
        ctx.check(got.awaitDistinct(20, 30_000), "only " + got.distinct().size() + " of 20 popped within 30 s");
        ctx.check(await(10_000, () -> cc.count(RequestCode.ACK_MESSAGE) + cc.count(RequestCode.BATCH_ACK_MESSAGE) >= 20),
            "the consumer did not ack all 20 within 10 s: " + cc.codes());
        // Acked messages must not come back: wait past the 5 s invisible time plus the time Apache
        // takes to revive an un-acked message (pop_raw_ack_and_invisible sees it within ~2-8 s).
        long last = got.all.stream().mapToLong(r -> r.at).max().orElse(System.currentTimeMillis());
        await(Math.max(0, last + 5000 + 10_000 - System.currentTimeMillis()), () -> got.all.size() > 20);
        ctx.eq("deliveries (each message once, none again after the invisible time)", 20, got.all.size());
        Map<String, Util.Received> seen = new HashMap<>();
        for (Util.Received r : got.all) {
            seen.put(r.body(), r);
        }
        for (Message s : sent) {
            String body = str(s.getBody());
            Util.Received r = seen.get(body);
            if (!ctx.check(r != null, body + " never delivered")) {
                continue;
            }
            ctx.eq(body + " topic", topic, r.msg.getTopic());
            ctx.eq(body + " tags", s.getTags(), r.msg.getTags());
            ctx.eq(body + " keys", s.getKeys(), r.msg.getKeys());
            ctx.eq(body + " user properties", Util.props("i", s.getUserProperty("i")), Util.userProps(r.msg));
            ctx.eq(body + " msgId", results.get(body).getMsgId(), r.msg.getMsgId());
            ctx.eq(body + " queue id", results.get(body).getMessageQueue().getQueueId(), r.msg.getQueueId());
            ctx.eq(body + " queue offset", results.get(body).getQueueOffset(), r.msg.getQueueOffset());
            ctx.eq(body + " reconsumeTimes", 0, r.msg.getReconsumeTimes());
            String[] x = ck(r.msg);
            ctx.check(x.length == 8 && "0".equals(x[4]) && x[7].equals(String.valueOf(r.msg.getQueueOffset())),
                body + " POP_CK " + Arrays.toString(x));
        }
        ctx.check(cc.count(RequestCode.POP_MESSAGE) > 0, "the consumer sent no POP_MESSAGE: " + cc.codes());
        ctx.note("consumer request codes " + cc.codes());
        ctx.note("its first POP_MESSAGE " + cc.firstRequest.get(RequestCode.POP_MESSAGE));
        ctx.note("first ACK_MESSAGE " + cc.firstRequest.get(RequestCode.ACK_MESSAGE));
        ctx.note("a delivered message's POP_CK " + got.all.get(0).msg.getProperty(MessageConst.PROPERTY_POP_CK)
            + ", property names " + new TreeSet<>(got.all.get(0).msg.getProperties().keySet()));
    }

    // ---- 2. RECONSUME_LATER in pop mode ------------------------------------------------------

    /**
     * The listener answers RECONSUME_LATER to the first delivery of one message: the client changes
     * its invisible time (10 s, the first of its pop delay levels), the broker revives it through
     * the pop retry topic, and it comes again once, reconsumeTimes 1, as the original topic.
     */
    static void invisibleRetry(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        Broker b = broker(ctx, topic, 4);
        b.createGroup(group, null);
        b.api.setMessageRequestMode(b.addr, topic, group, MessageRequestMode.POP, 0, 5000);
        Capture cc = new Capture(WireLog.forScenario(ctx.scenario));
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = popConsumer(ctx, group, cc);
        c.subscribe(topic, "*");
        AtomicInteger failures = new AtomicInteger();
        c.registerMessageListener((MessageListenerConcurrently) (msgs, x) -> {
            boolean later = false;
            for (MessageExt m : msgs) {
                got.add(m, "c");
                if (str(m.getBody()).equals("retry-me") && m.getReconsumeTimes() == 0 && failures.getAndIncrement() == 0) {
                    later = true;
                }
            }
            return later ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        // one message per send and per pop batch: RECONSUME_LATER applies to the whole batch
        SendResult sr = b.p.send(msg(topic, "Retry", "retry-key", "retry-me", props("attempt", "any")));
        List<Util.Received> deliveries = new ArrayList<>();
        boolean twice = await(45_000, () -> {
            deliveries.clear();
            got.all.stream().filter(r -> r.body().equals("retry-me")).forEach(deliveries::add);
            return deliveries.size() >= 2;
        });
        ctx.check(twice, "retry-me delivered " + deliveries.size() + " time(s) within 45 s, expected a second delivery");
        ctx.check(cc.count(RequestCode.CHANGE_MESSAGE_INVISIBLETIME) >= 1,
            "RECONSUME_LATER sent no CHANGE_MESSAGE_INVISIBLETIME: " + cc.codes());
        ctx.note("CHANGE_MESSAGE_INVISIBLETIME sent " + cc.firstRequest.get(RequestCode.CHANGE_MESSAGE_INVISIBLETIME)
            + ", answered " + shape(cc.lastResponse.get(RequestCode.CHANGE_MESSAGE_INVISIBLETIME)));
        if (deliveries.size() >= 2) {
            Util.Received first = deliveries.get(0);
            Util.Received again = deliveries.get(1);
            long gap = again.at - first.at;
            ctx.note("redelivered " + gap + " ms after the first delivery");
            // the client asked for 10 s after the first delivery; the broker cannot revive earlier
            ctx.check(gap >= 9000, "redelivered after " + gap + " ms, before the 10 s invisible time");
            ctx.eq("reconsumeTimes of the deliveries", Arrays.asList(0, 1),
                deliveries.stream().map(r -> r.msg.getReconsumeTimes()).collect(Collectors.toList()));
            MessageExt m = again.msg;
            ctx.eq("topic the listener sees on the redelivery", topic, m.getTopic());
            ctx.eq("body", "retry-me", str(m.getBody()));
            ctx.eq("keys", "retry-key", m.getKeys());
            ctx.eq("tags", "Retry", m.getTags());
            ctx.eq("user properties", props("attempt", "any"), Util.userProps(m));
            ctx.eq("msgId (UNIQ_KEY) kept", sr.getMsgId(), m.getMsgId());
            String[] x = ck(m);
            ctx.check(x.length == 8 && "1".equals(x[4]), "POP_CK of the redelivery should name the retry topic (flag 1): "
                + Arrays.toString(x));
            ctx.note("redelivery: RETRY_TOPIC=" + m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC)
                + " ORIGIN_MESSAGE_ID=" + m.getProperty(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID)
                + " queue " + m.getQueueId() + "@" + m.getQueueOffset() + " POP_CK=" + m.getProperty(MessageConst.PROPERTY_POP_CK)
                + " properties " + new TreeSet<>(m.getProperties().keySet()));
            ctx.eq("RETRY_TOPIC property on the redelivery", null, m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC));
            // acked now: must not come a third time (5 s invisible + revive time)
            await(Math.max(0, again.at + 5000 + 10_000 - System.currentTimeMillis()),
                () -> got.all.stream().filter(r -> r.body().equals("retry-me")).count() > 2);
            ctx.eq("deliveries of retry-me", 2L, got.all.stream().filter(r -> r.body().equals("retry-me")).count());
        }
        List<MessageExt> retry = b.pullDirect("%RETRY%" + group + "_" + topic, 0, 1, 10_000);
        ctx.eq("messages in %RETRY%" + group + "_" + topic, Arrays.asList("retry-me"), Util.bodies(retry));
        ctx.eq("messages in a v2-named retry topic %RETRY%group+topic", 0, b.pullDirect("%RETRY%" + group + "+" + topic, 0, 0, 0).size());
    }

    // ---- 3. raw pop, ack, batch ack, change invisible time ----------------------------------

    /**
     * Five messages in one queue, popped raw (queueId -1, 4 s invisible): one acked with
     * ACK_MESSAGE, two with BATCH_ACK_MESSAGE, one made visible after 1 s with
     * CHANGE_MESSAGE_INVISIBLETIME, one left alone. Only the last two come back, from the pop
     * retry topic %RETRY%group_topic, reconsumeTimes 1, not before their invisible times.
     */
    static void rawAckAndInvisible(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        Broker b = broker(ctx, topic, 4);
        b.createGroup(group, null);
        List<String> names = Arrays.asList("acked", "batch-1", "batch-2", "changed", "left");
        Map<String, SendResult> sent = new HashMap<>();
        for (String n : names) {
            sent.put(n, b.sendTo(topic, 1, msg(topic, "Raw", "raw-" + n, n, props("n", n))));
        }
        ctx.check(b.awaitStored(topic, 1, names.size()), "queue 1 never reached max offset 5");
        long invisible = 4000;
        Map<String, MessageExt> popped = new TreeMap<>();
        long popTime = 0;
        long t0 = System.currentTimeMillis();
        PopResult r = b.pop(group, topic, -1, 32, invisible, 1000, false);
        long t1 = System.currentTimeMillis();
        ctx.eq("first pop status", PopStatus.FOUND, r.getPopStatus());
        if (r.getPopStatus() == PopStatus.FOUND) {
            checkPopAnswer(ctx, b, "first pop", r, t0, t1, invisible, "0", false);
            popped.putAll(byBody(r.getMsgFoundList()));
            popTime = r.getPopTime();
            RemotingCommand raw = b.last(RequestCode.POP_MESSAGE);
            ctx.note("pop answer " + shape(raw));
            ctx.eq("startOffsetInfo", "0 1 0", hdr(raw, "startOffsetInfo"));
            ctx.eq("msgOffsetInfo", "0 1 0,1,2,3,4", hdr(raw, "msgOffsetInfo"));
            ctx.eq("restNum", "0", hdr(raw, "restNum"));
        }
        ctx.eq("popped in one answer", new TreeSet<>(names), popped.keySet());
        for (String n : names) {
            MessageExt m = popped.get(n);
            if (m == null) {
                continue;
            }
            ctx.eq(n + " topic", topic, m.getTopic());
            ctx.eq(n + " queue", 1, m.getQueueId());
            ctx.eq(n + " offset", sent.get(n).getQueueOffset(), m.getQueueOffset());
            ctx.eq(n + " msgId", sent.get(n).getMsgId(), m.getMsgId());
            ctx.eq(n + " keys", "raw-" + n, m.getKeys());
            ctx.eq(n + " reconsumeTimes", 0, m.getReconsumeTimes());
        }
        if (popped.size() != names.size()) {
            return;
        }
        // a second pop while all five are invisible finds nothing
        PopResult none = b.pop(group, topic, -1, 32, invisible, 0, false);
        ctx.eq("pop while all are invisible", PopStatus.POLLING_NOT_FOUND, none.getPopStatus());
        ctx.note("pop of an invisible batch (pollTime 0) answers " + shape(b.last(RequestCode.POP_MESSAGE)));

        AckResult a = b.ack(group, topic, popped.get("acked"));
        ctx.eq("ACK_MESSAGE status", AckStatus.OK, a.getStatus());
        ctx.note("ACK_MESSAGE answer " + shape(b.last(RequestCode.ACK_MESSAGE)));
        AckResult ba = b.batchAck(group, topic, Arrays.asList(popped.get("batch-1"), popped.get("batch-2")));
        ctx.eq("BATCH_ACK_MESSAGE status", AckStatus.OK, ba.getStatus());
        ctx.note("BATCH_ACK_MESSAGE answer " + shape(b.last(RequestCode.BATCH_ACK_MESSAGE)));
        long tc0 = System.currentTimeMillis();
        AckResult ch = b.changeInvisible(group, topic, popped.get("changed"), 1000);
        long tc1 = System.currentTimeMillis();
        ctx.eq("CHANGE_MESSAGE_INVISIBLETIME status", AckStatus.OK, ch.getStatus());
        RemotingCommand chRaw = b.last(RequestCode.CHANGE_MESSAGE_INVISIBLETIME);
        ctx.note("CHANGE_MESSAGE_INVISIBLETIME answer " + shape(chRaw));
        ctx.eq("CHANGE_MESSAGE_INVISIBLETIME invisibleTime", "1000", hdr(chRaw, "invisibleTime"));
        ctx.check(ch.getPopTime() >= tc0 && ch.getPopTime() <= tc1,
            "CHANGE_MESSAGE_INVISIBLETIME popTime " + ch.getPopTime() + " not the time of the change [" + tc0 + ", " + tc1 + "]");
        ctx.eq("CHANGE_MESSAGE_INVISIBLETIME reviveQid", ck(popped.get("changed"))[3], hdr(chRaw, "reviveQid"));

        // pop until both come back; nothing else may
        Map<String, MessageExt> back = new TreeMap<>();
        Map<String, Long> backAt = new TreeMap<>();
        List<String> unexpected = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 40_000;
        while (back.size() < 2 && System.currentTimeMillis() < deadline) {
            long p0 = System.currentTimeMillis();
            PopResult again = b.pop(group, topic, -1, 32, 10_000, 1000, false);
            long p1 = System.currentTimeMillis();
            for (MessageExt m : found(again)) {
                String n = str(m.getBody());
                if ((n.equals("changed") || n.equals("left")) && !back.containsKey(n)) {
                    back.put(n, m);
                    backAt.put(n, p1);
                    checkPopAnswer(ctx, b, "pop of " + n + " again", again, p0, p1, 10_000, "1", false);
                    ctx.note(n + " back " + (p1 - popTime) + " ms after the pop, answer " + shape(b.last(RequestCode.POP_MESSAGE)));
                } else {
                    unexpected.add(n + "(reconsumeTimes " + m.getReconsumeTimes() + ")");
                }
            }
        }
        ctx.eq("messages that came back", new TreeSet<>(Arrays.asList("changed", "left")), back.keySet());
        for (Map.Entry<String, MessageExt> e : back.entrySet()) {
            MessageExt m = e.getValue();
            String n = e.getKey();
            ctx.eq(n + " again: reconsumeTimes", 1, m.getReconsumeTimes());
            ctx.eq(n + " again: topic", topic, m.getTopic());
            ctx.eq(n + " again: msgId", sent.get(n).getMsgId(), m.getMsgId());
            ctx.eq(n + " again: keys", "raw-" + n, m.getKeys());
            ctx.eq(n + " again: tags", "Raw", m.getTags());
            ctx.eq(n + " again: user properties", props("n", n), Util.userProps(m));
            ctx.eq(n + " again: queue (of the retry topic)", 0, m.getQueueId());
        }
        if (backAt.containsKey("left")) {
            ctx.check(backAt.get("left") >= popTime + invisible,
                "left came back " + (backAt.get("left") - popTime) + " ms after its pop, before its 4 s invisible time");
        }
        if (backAt.containsKey("changed")) {
            ctx.check(backAt.get("changed") >= tc0 + 1000,
                "changed came back " + (backAt.get("changed") - tc0) + " ms after the change to 1 s");
        }
        for (MessageExt m : back.values()) {
            ctx.eq("ACK_MESSAGE of " + str(m.getBody()) + " popped from the retry topic", AckStatus.OK, b.ack(group, topic, m).getStatus());
        }
        // the acked three were in the same checkpoint as "left": had their acks been lost, they
        // would have come back with it; one more pop round to be sure nothing else is pending
        PopResult tail = b.pop(group, topic, -1, 32, 10_000, 2000, false);
        for (MessageExt m : found(tail)) {
            unexpected.add(str(m.getBody()) + "(reconsumeTimes " + m.getReconsumeTimes() + ")");
        }
        ctx.eq("acked or unexpected messages popped again", Collections.emptyList(), unexpected);
        List<MessageExt> retry = b.pullDirect("%RETRY%" + group + "_" + topic, 0, 2, 10_000);
        ctx.eq("messages in the pop retry topic %RETRY%" + group + "_" + topic, Arrays.asList("changed", "left"),
            Util.bodies(retry).stream().sorted().collect(Collectors.toList()));
        if (!retry.isEmpty()) {
            MessageExt m = retry.get(0);
            ctx.note("stored in the retry topic: reconsumeTimes " + m.getReconsumeTimes() + ", properties "
                + new TreeSet<>(m.getProperties().keySet()) + ", RETRY_TOPIC=" + m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC));
        }
        ctx.eq("messages in a v2-named retry topic %RETRY%group+topic", 0, b.pullDirect("%RETRY%" + group + "+" + topic, 0, 0, 0).size());
    }

    // ---- 4. orderly pop ----------------------------------------------------------------------

    /**
     * order=true on queue 0: the queue is blocked while a batch is un-acked; acking it lets the
     * next batch out; an un-acked batch comes again after its invisible time from the same queue
     * and offsets (not the retry topic), with reconsumeTimes from the answer's orderCountInfo.
     */
    static void orderly(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        Broker b = broker(ctx, topic, 4);
        b.createGroup(group, null);
        for (int i = 0; i < 6; i++) {
            b.sendTo(topic, 0, msg(topic, "Ord", "ord-" + i, "ord-" + i, null));
        }
        ctx.check(b.awaitStored(topic, 0, 6), "queue 0 never reached max offset 6");
        long invisible = 3000;
        long t0 = System.currentTimeMillis();
        PopResult first = b.pop(group, topic, 0, 3, invisible, 1000, true);
        long t1 = System.currentTimeMillis();
        ctx.eq("first orderly pop", Arrays.asList("ord-0", "ord-1", "ord-2"), Util.bodies(found(first)));
        if (!found(first).isEmpty()) {
            checkPopAnswer(ctx, b, "first orderly pop", first, t0, t1, invisible, "0", true);
            ctx.note("orderly pop answer " + shape(b.last(RequestCode.POP_MESSAGE)));
        }
        PopResult blocked = b.pop(group, topic, 0, 3, invisible, 1000, true);
        ctx.eq("orderly pop while the batch is un-acked", Collections.emptyList(), Util.bodies(found(blocked)));
        ctx.note("blocked orderly pop: " + blocked.getPopStatus() + " " + shape(b.last(RequestCode.POP_MESSAGE)));
        for (MessageExt m : found(first)) {
            ctx.eq("orderly ACK_MESSAGE of " + str(m.getBody()), AckStatus.OK, b.ack(group, topic, m).getStatus());
        }
        long s0 = System.currentTimeMillis();
        PopResult second = b.pop(group, topic, 0, 3, invisible, 1000, true);
        long s1 = System.currentTimeMillis();
        ctx.eq("orderly pop after the acks", Arrays.asList("ord-3", "ord-4", "ord-5"), Util.bodies(found(second)));
        long secondPop = second.getPopTime();
        // no ack: the same batch must come again, not before its invisible time
        PopResult again = null;
        long againAt = 0;
        List<String> blockedAnswers = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 30_000;
        while (System.currentTimeMillis() < deadline) {
            PopResult r = b.pop(group, topic, 0, 3, invisible, 1000, true);
            if (!found(r).isEmpty()) {
                again = r;
                againAt = System.currentTimeMillis();
                break;
            }
            blockedAnswers.add(String.valueOf(b.last(RequestCode.POP_MESSAGE).getCode()));
        }
        ctx.check(again != null, "the un-acked orderly batch did not come again within 30 s");
        if (again != null) {
            ctx.note("un-acked orderly batch again " + (againAt - secondPop) + " ms after its pop; answers while blocked "
                + new TreeSet<>(blockedAnswers) + "; answer " + shape(b.last(RequestCode.POP_MESSAGE)));
            ctx.check(againAt >= s0 + invisible, "the orderly batch came again " + (againAt - s0) + " ms after its pop, within its 3 s");
            ctx.eq("orderly batch again", Arrays.asList("ord-3", "ord-4", "ord-5"), Util.bodies(found(again)));
            for (MessageExt m : found(again)) {
                ctx.eq(str(m.getBody()) + " again: queue", 0, m.getQueueId());
                ctx.eq(str(m.getBody()) + " again: topic", topic, m.getTopic());
                ctx.eq(str(m.getBody()) + " again: reconsumeTimes (orderCountInfo)", 1, m.getReconsumeTimes());
                String[] x = ck(m);
                ctx.check(x.length == 8 && "0".equals(x[4]), str(m.getBody()) + " again: POP_CK names the topic itself, not the retry topic: "
                    + Arrays.toString(x));
            }
            ctx.eq("offsets again", Arrays.asList(3L, 4L, 5L),
                found(again).stream().map(MessageExt::getQueueOffset).collect(Collectors.toList()));
            for (MessageExt m : found(again)) {
                ctx.eq("orderly ACK_MESSAGE of " + str(m.getBody()) + " again", AckStatus.OK, b.ack(group, topic, m).getStatus());
            }
        }
        PopResult rest = b.pop(group, topic, 0, 3, invisible, 1000, true);
        ctx.eq("orderly pop after everything was acked", Collections.emptyList(), Util.bodies(found(rest)));
        ctx.note("empty orderly pop: " + rest.getPopStatus() + " code " + b.last(RequestCode.POP_MESSAGE).getCode());
        ctx.check(Util.awaitCommitted(b.p, group, topic, 6, 10_000),
            "the group's committed offset on queue 0 never reached 6: " + Util.committedTotal(b.p, group, topic));
        ctx.eq("messages the orderly pops put into the retry topic", 0, b.pullDirect("%RETRY%" + group + "_" + topic, 0, 0, 0).size());
    }

    // ---- 5. notification ---------------------------------------------------------------------

    /**
     * NOTIFICATION: false after its poll time on an empty topic; true at once when a message waits;
     * a waiting notification answers true when a message arrives; false again once the group has
     * popped and acked it.
     */
    static void notification(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        Broker b = broker(ctx, topic, 4);
        b.createGroup(group, null);
        long t0 = System.currentTimeMillis();
        NotificationResponseHeader empty = b.notification(group, topic, -1, 2000);
        long waited = System.currentTimeMillis() - t0;
        ctx.eq("hasMsg on an empty topic", false, empty.isHasMsg());
        ctx.note("empty topic: hasMsg=false after " + waited + " ms (pollTime 2000), " + shape(b.last(RequestCode.NOTIFICATION)));
        ctx.check(waited >= 1700, "an empty-topic NOTIFICATION answered after " + waited + " ms, before its 2 s poll time");

        b.sendTo(topic, 2, msg(topic, "N", "n-1", "n-1", null));
        ctx.check(b.awaitStored(topic, 2, 1), "queue 2 never reached max offset 1");
        long t1 = System.currentTimeMillis();
        NotificationResponseHeader has = b.notification(group, topic, -1, 2000);
        ctx.eq("hasMsg with a message waiting", true, has.isHasMsg());
        ctx.note("message waiting: hasMsg=true after " + (System.currentTimeMillis() - t1) + " ms");
        ctx.eq("hasMsg for queue 2 (the message's)", true, b.notification(group, topic, 2, 1000).isHasMsg());
        ctx.eq("hasMsg for queue 1 (empty)", false, b.notification(group, topic, 1, 1000).isHasMsg());

        // a notification waiting on an empty topic wakes up when a message arrives
        String topic2 = ctx.name("t");
        Broker b2 = broker(ctx, topic2, 4);
        CompletableFuture<NotificationResponseHeader> waiting = CompletableFuture.supplyAsync(() -> {
            try {
                return b.notification(group, topic2, -1, 10_000);
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
        Thread.sleep(1000); // let it reach the broker and wait there: the point is a wake-up
        long sentAt = System.currentTimeMillis();
        b2.p.send(msg(topic2, "N", "n-2", "n-2", null));
        NotificationResponseHeader woke = waiting.get(20, TimeUnit.SECONDS);
        long after = System.currentTimeMillis() - sentAt;
        ctx.eq("hasMsg of a waiting NOTIFICATION when a message arrives", true, woke.isHasMsg());
        ctx.note("waiting NOTIFICATION answered " + after + " ms after the send (pollTime 10000)");
        ctx.check(after < 8000, "the waiting NOTIFICATION answered " + after + " ms after the send: not woken by the message");

        // popped and acked: nothing for the group any more
        List<MessageExt> popped = new ArrayList<>();
        await(10_000, () -> {
            try {
                popped.addAll(found(b.pop(group, topic, -1, 32, 10_000, 500, false)));
            } catch (Exception e) {
                // retried until the deadline
            }
            return !popped.isEmpty();
        });
        ctx.eq("popped", Arrays.asList("n-1"), Util.bodies(popped));
        for (MessageExt m : popped) {
            ctx.eq("ack", AckStatus.OK, b.ack(group, topic, m).getStatus());
        }
        ctx.eq("hasMsg after the group popped and acked everything", false, b.notification(group, topic, -1, 1000).isHasMsg());
    }

    // ---- 6. retryMaxTimes and the DLQ ----------------------------------------------------------

    /**
     * A group with retryMaxTimes 1. Apache's broker does not move a popped message to the DLQ by
     * itself: un-acked, it comes back with reconsumeTimes 1, then 2, and %DLQ%group stays empty.
     * The client decides (the 5.x proxy does it for gRPC consumers): CONSUMER_SEND_MSG_BACK (36)
     * with delayLevel -1 and then ACK_MESSAGE put it in %DLQ%group, and it is not popped again.
     */
    static void toDlq(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        Broker b = broker(ctx, topic, 4);
        b.createGroup(group, 1);
        SendResult sr = b.sendTo(topic, 0, msg(topic, "Dlq", "dlq-key", "dlq-body", props("p", "v")));
        ctx.check(b.awaitStored(topic, 0, 1), "queue 0 never reached max offset 1");
        long invisible = 3000;
        List<MessageExt> deliveries = new ArrayList<>();
        List<Long> at = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 60_000;
        while (deliveries.size() < 3 && System.currentTimeMillis() < deadline) {
            for (MessageExt m : found(b.pop(group, topic, -1, 32, invisible, 1000, false))) {
                deliveries.add(m);
                at.add(System.currentTimeMillis());
            }
        }
        List<Integer> times = deliveries.stream().map(MessageExt::getReconsumeTimes).collect(Collectors.toList());
        ctx.eq("reconsumeTimes of three pops without ack (retryMaxTimes 1)", Arrays.asList(0, 1, 2), times);
        for (int i = 1; i < at.size(); i++) {
            ctx.note("pop " + (i + 1) + " came " + (at.get(i) - at.get(i - 1)) + " ms after the previous");
            ctx.check(at.get(i) - at.get(i - 1) >= invisible - 1000,
                "pop " + (i + 1) + " only " + (at.get(i) - at.get(i - 1)) + " ms after the previous");
        }
        ctx.eq("messages in %DLQ%" + group + " before the client forwarded anything", 0, b.pullDirect("%DLQ%" + group, 0, 0, 0).size());
        if (deliveries.size() < 3) {
            return;
        }
        MessageExt last = deliveries.get(2);
        ctx.note("third pop: " + str(last.getBody()) + " queue " + last.getQueueId() + "@" + last.getQueueOffset()
            + " commitLogOffset " + last.getCommitLogOffset() + " POP_CK " + last.getProperty(MessageConst.PROPERTY_POP_CK));
        // as the proxy's forwardMessageToDeadLetterQueue does: send back with delay level -1, then ack
        b.api.consumerSendMessageBack(b.addr, b.name, last, group, -1, 10_000, 0);
        ctx.eq("ACK_MESSAGE after the forward", AckStatus.OK, b.ack(group, topic, last).getStatus());
        List<MessageExt> dlq = b.pullDirect("%DLQ%" + group, 0, 1, 15_000);
        ctx.eq("bodies in %DLQ%" + group, Arrays.asList("dlq-body"), Util.bodies(dlq));
        if (!dlq.isEmpty()) {
            MessageExt d = dlq.get(0);
            ctx.eq("DLQ keys", "dlq-key", d.getKeys());
            ctx.eq("DLQ tags", "Dlq", d.getTags());
            ctx.eq("DLQ user properties", props("p", "v"), Util.userProps(d));
            ctx.eq("DLQ UNIQ_KEY", sr.getMsgId(), d.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            ctx.eq("DLQ reconsumeTimes", 3, d.getReconsumeTimes());
            ctx.eq("DLQ RETRY_TOPIC", "%RETRY%" + group + "_" + topic, d.getProperty(MessageConst.PROPERTY_RETRY_TOPIC));
            if (last instanceof MessageClientExt) {
                // the broker names the copy it looked up by commit-log offset: the retry topic's
                ctx.eq("DLQ ORIGIN_MESSAGE_ID (offset msgId of the popped retry-topic copy)",
                    ((MessageClientExt) last).getOffsetMsgId(), d.getProperty(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID));
            }
            ctx.note("DLQ message: reconsumeTimes " + d.getReconsumeTimes() + " RETRY_TOPIC=" + d.getProperty(MessageConst.PROPERTY_RETRY_TOPIC)
                + " ORIGIN_MESSAGE_ID=" + d.getProperty(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID) + " (send offsetMsgId "
                + sr.getOffsetMsgId() + ") properties " + new TreeSet<>(d.getProperties().keySet()));
        }
        // not popped again once its invisible time has passed
        long quietUntil = System.currentTimeMillis() + invisible + 8000;
        List<String> again = new ArrayList<>();
        while (System.currentTimeMillis() < quietUntil) {
            for (MessageExt m : found(b.pop(group, topic, -1, 32, invisible, 1000, false))) {
                again.add(str(m.getBody()) + "(reconsumeTimes " + m.getReconsumeTimes() + ")");
            }
        }
        ctx.eq("popped after the forward to the DLQ", Collections.emptyList(), again);
    }
}
