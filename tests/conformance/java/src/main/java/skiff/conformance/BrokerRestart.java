package skiff.conformance;

import static skiff.conformance.Scenarios.pullConsumer;
import static skiff.conformance.Util.msg;
import static skiff.conformance.Util.producer;
import static skiff.conformance.Util.push;
import static skiff.conformance.Util.readAll;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * broker_restart_resumes, in two phases around a clean broker restart done by run.sh:
 * phase 1 sends 10 messages (each with a key) and consumes them with a group that then shuts
 * down (its offsets committed); phase 2 (same data, broker restarted) checks the 10 are still
 * stored and still found by key and by unique key, sends 5 more and requires the same group to
 * get exactly those 5.
 */
final class BrokerRestart {
    static final String NAME = "broker_restart_resumes";

    private BrokerRestart() {}

    static void phase1(Ctx ctx, Path state) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("cg");
        DefaultMQProducer p = producer(ctx);
        String uniqueKey = null;
        for (int i = 0; i < 10; i++) {
            String id = p.send(msg(topic, "BR", "br-key-" + i, "before-" + i, null)).getMsgId();
            if (i == 3) {
                uniqueKey = id;
            }
        }
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = consumer(ctx, topic, group, got);
        c.start();
        ctx.check(got.awaitDistinct(10, 20_000), "before the restart the group got " + got.distinct().size() + "/10");
        Thread.sleep(1500);
        ctx.check(Util.awaitCommitted(p, group, topic, 10, 15_000),
            "offsets committed before the restart: " + Util.committedTotal(p, group, topic) + "/10");
        c.shutdown();
        ctx.eq("deliveries before the restart", 10, got.all.size());
        Files.write(state, (topic + "\n" + group + "\n" + uniqueKey + "\n").getBytes(StandardCharsets.UTF_8));
    }

    static void phase2(Ctx ctx, Path state) throws Exception {
        List<String> lines = Files.readAllLines(state, StandardCharsets.UTF_8);
        String topic = lines.get(0);
        String group = lines.get(1);
        List<MessageExt> stored = readAll(ctx, topic, 10, 15_000);
        ctx.eq("messages still stored after the restart", 10, stored.size());
        DefaultMQPullConsumer lookup = pullConsumer(ctx);
        long now = System.currentTimeMillis();
        try {
            QueryResult q = lookup.queryMessage(topic, "br-key-7", 32, now - 600_000, now + 600_000);
            ctx.eq("queryMessage by key after the restart", Arrays.asList("before-7"), Util.bodies(q.getMessageList()));
        } catch (Exception e) {
            ctx.fail("queryMessage by key after the restart: " + Main.chain(e));
        }
        try {
            MessageExt m = lookup.viewMessage(topic, lines.get(2));
            ctx.eq("viewMessage by unique key after the restart", "before-3", m == null ? null : new String(m.getBody(), StandardCharsets.UTF_8));
        } catch (Exception e) {
            ctx.fail("viewMessage by unique key after the restart: " + Main.chain(e));
        }
        DefaultMQProducer p = producer(ctx);
        for (int i = 0; i < 5; i++) {
            p.send(msg(topic, "BR", null, "after-" + i, null));
        }
        Util.Collector got = new Util.Collector();
        DefaultMQPushConsumer c = consumer(ctx, topic, group, got);
        c.start();
        got.awaitDistinct(5, 20_000);
        Thread.sleep(3000);
        Set<String> want = new TreeSet<>();
        for (int i = 0; i < 5; i++) {
            want.add("after-" + i);
        }
        ctx.eq("bodies delivered to the group after the broker restart", want, new TreeSet<>(got.bodies()));
        ctx.eq("deliveries after the broker restart", 5, got.all.size());
    }

    private static DefaultMQPushConsumer consumer(Ctx ctx, String topic, String group, Util.Collector got) throws Exception {
        DefaultMQPushConsumer c = push(ctx, group);
        c.subscribe(topic, "*");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, cc) -> {
            msgs.forEach(x -> got.add(x, "c"));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        return c;
    }
}
