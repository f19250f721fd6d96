package skiff.conformance;

import static skiff.conformance.Util.await;
import static skiff.conformance.Util.msg;
import static skiff.conformance.Util.producer;
import static skiff.conformance.Util.push;

import java.util.Set;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;

/**
 * Where topics are made: only a send (with auto-creation on) or an explicit create makes one.
 * A route query, a topic's status and a consumer's subscription to a name nobody created answer
 * "not found" and leave nothing behind, so a typo fails on a dev broker as it will on a cluster.
 * Written against the types 4.9.8 and 5.x share (route and list types moved package; {@code var}
 * names them without an import).
 */
final class TopicCreation {
    private TopicCreation() {}

    /** RocketMQ's ResponseCode.TOPIC_NOT_EXIST. */
    static final int TOPIC_NOT_EXIST = 17;

    static MQClientAPIImpl api(DefaultMQProducer p) {
        return p.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
    }

    /** The response code of a route query for {@code topic}, or 0 when it answers a route. */
    static int routeCode(DefaultMQProducer p, String topic) throws Exception {
        try {
            api(p).getTopicRouteInfoFromNameServer(topic, 3000);
            return 0;
        } catch (MQClientException e) {
            return e.getResponseCode();
        }
    }

    static Set<String> topicList(DefaultMQProducer p) throws Exception {
        return api(p).getTopicListFromNameServer(3000).getTopicList();
    }

    /** The master address of the broker the auto-create topic routes to (every broker here). */
    static String brokerAddr(DefaultMQProducer p) throws Exception {
        var route = api(p).getTopicRouteInfoFromNameServer(p.getCreateTopicKey(), 3000);
        return route.getBrokerDatas().get(0).selectBrokerAddr();
    }

    /** A route query for a topic nobody created answers TOPIC_NOT_EXIST and creates nothing. */
    static void missingTopicRoute(Ctx ctx) throws Exception {
        String typo = ctx.name("typo");
        DefaultMQProducer p = producer(ctx);
        ctx.eq("route of a missing topic: response code", TOPIC_NOT_EXIST, routeCode(p, typo));
        ctx.eq("route asked again: response code", TOPIC_NOT_EXIST, routeCode(p, typo));
        ctx.check(!topicList(p).contains(typo), "a route query created " + typo);
    }

    /** GET_TOPIC_STATS_INFO of a missing topic: TOPIC_NOT_EXIST from the broker, nothing made. */
    static void missingTopicStatus(Ctx ctx) throws Exception {
        String typo = ctx.name("typo");
        DefaultMQProducer p = producer(ctx);
        try {
            api(p).getTopicStatsInfo(brokerAddr(p), typo, 3000);
            ctx.fail("the status of a missing topic was answered");
        } catch (MQBrokerException e) {
            ctx.eq("topic status of a missing topic: response code", TOPIC_NOT_EXIST, e.getResponseCode());
        }
        ctx.eq("route after the status query: response code", TOPIC_NOT_EXIST, routeCode(p, typo));
    }

    /**
     * A push consumer subscribed to a missing topic starts (the client only warns; its start
     * asks the topic's route before it returns), finds no queue to consume, and the topic it
     * subscribed to stays missing. With no route it knows no broker, so it sends no heartbeat
     * and its group is not made either.
     */
    static void missingTopicConsumer(Ctx ctx) throws Exception {
        String typo = ctx.name("typo");
        String group = ctx.name("g");
        DefaultMQProducer p = producer(ctx);
        DefaultMQPushConsumer c = push(ctx, group);
        c.subscribe(typo, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, context) ->
            ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        c.start();
        try {
            Set<?> queues = c.fetchSubscribeMessageQueues(typo);
            ctx.fail("queues of a missing topic: " + queues);
        } catch (MQClientException e) {
            ctx.note("fetchSubscribeMessageQueues: " + e.getErrorMessage());
        }
        ctx.eq("route of the subscribed missing topic: response code", TOPIC_NOT_EXIST, routeCode(p, typo));
        ctx.eq("route of the group's retry topic: response code", TOPIC_NOT_EXIST,
            routeCode(p, "%RETRY%" + group));
        ctx.check(!topicList(p).contains(typo), "a consumer's subscription created " + typo);
    }

    /**
     * A producer's first send to a new topic succeeds: the client falls back to the auto-create
     * topic's route and the broker creates the topic with the client's default queue count.
     */
    static void firstSendCreatesTopic(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        DefaultMQProducer p = producer(ctx);
        ctx.eq("route before the first send: response code", TOPIC_NOT_EXIST, routeCode(p, topic));
        SendResult r = p.send(msg(topic, "A", null, "first", null));
        ctx.eq("first send status", SendStatus.SEND_OK, r.getSendStatus());
        boolean routed = await(20_000, () -> {
            try {
                return routeCode(p, topic) == 0;
            } catch (Exception e) {
                return false;
            }
        });
        ctx.check(routed, "the topic made by the first send has no route within 20 s");
        if (routed) {
            var route = api(p).getTopicRouteInfoFromNameServer(topic, 3000);
            int writeQueues = route.getQueueDatas().stream().mapToInt(q -> q.getWriteQueueNums()).sum();
            ctx.eq("write queues of the auto-created topic", p.getDefaultTopicQueueNums(), writeQueues);
        }
        ctx.check(topicList(p).contains(topic), topic + " not in the topic list after its first send");
    }
}
