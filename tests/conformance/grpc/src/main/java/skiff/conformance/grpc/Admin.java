package skiff.conformance.grpc;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Topic and group set-up over RocketMQ remoting, as mqadmin does it: DefaultMQAdminExt through the
 * name server (Apache: the name server beside the proxy; skiff: its one port, name server and
 * broker at once). The proxy has no RPC that creates a topic or a group.
 */
final class Admin implements AutoCloseable {
    private final String namesrv;
    private final DefaultMQAdminExt ext;
    private volatile String brokerAddr;

    Admin(String namesrv) throws Exception {
        this.namesrv = namesrv;
        ext = new DefaultMQAdminExt("gc_admin_" + Ctx.newRunId(), 10_000);
        ext.setNamesrvAddr(namesrv);
        ext.setInstanceName("gc_admin_" + Ctx.newRunId());
        ext.start();
    }

    /** The name server address the remoting clients of the cross-protocol scenarios use. */
    String namesrv() {
        return namesrv;
    }

    /** The master address of the one broker the name server knows. */
    String brokerAddr() throws Exception {
        if (brokerAddr == null) {
            ClusterInfo ci = ext.examineBrokerClusterInfo();
            for (BrokerData bd : ci.getBrokerAddrTable().values()) {
                String a = bd.getBrokerAddrs().get(0L);
                if (a != null) {
                    brokerAddr = a;
                    break;
                }
            }
            if (brokerAddr == null) {
                throw new IllegalStateException("no master broker in " + ci.getBrokerAddrTable());
            }
        }
        return brokerAddr;
    }

    /**
     * UPDATE_AND_CREATE_TOPIC with 4 queues and the attribute {@code +message.type=TYPE} (NORMAL,
     * FIFO, DELAY or TRANSACTION), then waits until the name server routes it: the proxy answers
     * QueryRoute from the name server and caches a miss for a while.
     */
    void createTopic(String topic, String type) throws Exception {
        createTopic(topic, type, 4);
    }

    void createTopic(String topic, String type, int queues) throws Exception {
        createTopic(topic, type, queues, Map.of());
    }

    /** As above, with more topic attributes (name without the '+', value). */
    void createTopic(String topic, String type, int queues, Map<String, String> more) throws Exception {
        TopicConfig tc = new TopicConfig(topic, queues, queues, 6);
        Map<String, String> attrs = new HashMap<>();
        attrs.put("+message.type", type);
        more.forEach((k, v) -> attrs.put("+" + k, v));
        tc.setAttributes(attrs);
        ext.createAndUpdateTopicConfig(brokerAddr(), tc);
        long deadline = System.currentTimeMillis() + 15_000;
        Exception last = null;
        while (System.currentTimeMillis() < deadline) {
            try {
                if (!ext.examineTopicRouteInfo(topic).getQueueDatas().isEmpty()) {
                    return;
                }
            } catch (Exception e) {
                last = e;
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("topic " + topic + " not routed 15 s after creation", last);
    }

    /** UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: FIFO (consumeMessageOrderly) and retryMaxTimes. */
    void createGroup(String group, boolean orderly, int retryMaxTimes) throws Exception {
        SubscriptionGroupConfig g = new SubscriptionGroupConfig();
        g.setGroupName(group);
        g.setConsumeMessageOrderly(orderly);
        g.setRetryMaxTimes(retryMaxTimes);
        ext.createAndUpdateSubscriptionGroupConfig(brokerAddr(), g);
    }

    /** A lite group: bound to its LITE parent topic, Shared or Exclusive, with more attributes. */
    void createLiteGroup(String group, String parent, String model, String... more) throws Exception {
        createLiteGroup(group, parent, model, new SubscriptionGroupConfig().getRetryMaxTimes(), more);
    }

    /** A lite group as above, with its retryMaxTimes. */
    void createLiteGroup(String group, String parent, String model, int retryMaxTimes, String... more)
        throws Exception {
        SubscriptionGroupConfig g = new SubscriptionGroupConfig();
        g.setGroupName(group);
        g.setRetryMaxTimes(retryMaxTimes);
        Map<String, String> attrs = new HashMap<>();
        attrs.put("+lite.bind.topic", parent);
        attrs.put("+lite.sub.model", model);
        for (int i = 0; i + 1 < more.length; i += 2) {
            attrs.put("+" + more[i], more[i + 1]);
        }
        g.setAttributes(attrs);
        ext.createAndUpdateSubscriptionGroupConfig(brokerAddr(), g);
    }

    /**
     * GET_LITE_TOPIC_INFO (mqadmin getLiteTopicInfo): the lite topic's subscribers (client ids)
     * and the offset its next message gets (0 for one that holds nothing or no longer exists).
     */
    LiteTopicState liteTopic(String parent, String lite) throws Exception {
        var info = ext.getLiteTopicInfo(brokerAddr(), parent, lite);
        List<String> clients = new ArrayList<>();
        if (info.getSubscriber() != null) {
            info.getSubscriber().forEach(cg -> clients.add(cg.clientId));
        }
        long next = info.getTopicOffset() == null ? 0 : info.getTopicOffset().getMaxOffset();
        return new LiteTopicState(clients, next);
    }

    /** What {@link #liteTopic} answers. */
    record LiteTopicState(List<String> subscribers, long nextOffset) {
    }

    /**
     * SET_MESSAGE_REQUEST_MODE (401): the group consumes the topic in POP mode, so a remoting push
     * consumer with setClientRebalance(false) pops (all queues, queue id -1) as the gRPC clients do.
     */
    void setPopMode(String topic, String group) throws Exception {
        ext.setMessageRequestMode(brokerAddr(), topic, group,
            org.apache.rocketmq.common.message.MessageRequestMode.POP, 0, 10_000);
    }

    /** GET_CONSUMER_CONNECTION_LIST of the group (the members the broker knows). */
    org.apache.rocketmq.remoting.protocol.body.ConsumerConnection consumerConnection(String group) throws Exception {
        return ext.examineConsumerConnectionInfo(group);
    }

    /** The sum of the max offsets of the topic's queues, or -1 when it has no route. */
    long messageCount(String topic) throws Exception {
        try {
            long n = 0;
            for (var e : ext.examineTopicStats(topic).getOffsetTable().entrySet()) {
                n += e.getValue().getMaxOffset() - e.getValue().getMinOffset();
            }
            return n;
        } catch (Exception e) {
            return -1;
        }
    }

    /**
     * Every message stored in the topic (PULL_MESSAGE from offset 0 of each queue), read until
     * {@code expected} are found or the deadline passes.
     */
    List<MessageExt> readAll(String topic, int expected, long timeoutMs) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        DefaultMQPullConsumer c = new DefaultMQPullConsumer("gc_reader_" + Ctx.newRunId());
        c.setNamesrvAddr(namesrv);
        c.setInstanceName("gc_reader_" + Ctx.newRunId());
        c.start();
        try {
            List<MessageExt> out = new ArrayList<>();
            while (System.currentTimeMillis() < deadline) {
                out.clear();
                Set<MessageQueue> mqs;
                try {
                    mqs = c.fetchSubscribeMessageQueues(topic);
                } catch (Exception e) {
                    Thread.sleep(300);
                    continue;
                }
                for (MessageQueue mq : mqs) {
                    long offset = 0;
                    while (true) {
                        PullResult r = c.pull(mq, "*", offset, 32, 3000);
                        if (r.getPullStatus() != PullStatus.FOUND) {
                            break;
                        }
                        out.addAll(r.getMsgFoundList());
                        offset = r.getNextBeginOffset();
                    }
                }
                if (out.size() >= expected) {
                    return out;
                }
                Thread.sleep(300);
            }
            return out;
        } finally {
            c.shutdown();
        }
    }

    @Override
    public void close() {
        ext.shutdown();
    }
}
