package skiff.conformance.grpc;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.MessageListener;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.TransactionChecker;

/** Client construction and message helpers shared by the scenarios. */
final class Util {
    private Util() {}

    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    /** The receive long-polling time of every SimpleConsumer (the proxy's minimum is 5 s). */
    static final Duration AWAIT = Duration.ofSeconds(5);

    static Producer producerWith(Ctx ctx, String namespace, TransactionChecker checker, String... topics)
        throws ClientException {
        ProducerBuilder b = PROVIDER.newProducerBuilder().setClientConfiguration(ctx.config(namespace));
        if (topics.length > 0) {
            b.setTopics(topics);
        }
        if (checker != null) {
            b.setTransactionChecker(checker);
        }
        Producer p = b.build();
        ctx.closeLater(p);
        return p;
    }

    static Producer producer(Ctx ctx, String... topics) throws ClientException {
        return producerWith(ctx, null, null, topics);
    }

    static SimpleConsumer simple(Ctx ctx, String namespace, String group, String topic) throws ClientException {
        SimpleConsumer c = PROVIDER.newSimpleConsumerBuilder()
            .setClientConfiguration(ctx.config(namespace))
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
            .setAwaitDuration(AWAIT)
            .build();
        ctx.closeLater(c);
        return c;
    }

    static SimpleConsumer simple(Ctx ctx, String group, String topic) throws ClientException {
        return simple(ctx, null, group, topic);
    }

    static PushConsumer push(Ctx ctx, String group, String topic, MessageListener listener) throws ClientException {
        PushConsumer c = PROVIDER.newPushConsumerBuilder()
            .setClientConfiguration(ctx.config())
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
            .setConsumptionThreadCount(4)
            .setMessageListener(listener)
            .build();
        ctx.closeLater(c);
        return c;
    }

    static MessageBuilder msg(String topic, String tag, String body, String... keys) {
        MessageBuilder b = PROVIDER.newMessageBuilder().setTopic(topic).setBody(utf8(body));
        if (tag != null) {
            b.setTag(tag);
        }
        if (keys.length > 0) {
            b.setKeys(keys);
        }
        return b;
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String body(MessageView v) {
        ByteBuffer b = v.getBody().duplicate();
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    /** A received message and when the client had it. */
    static final class Got {
        final MessageView view;
        final long at;
        final String body;

        Got(MessageView view, long at) {
            this.view = view;
            this.at = at;
            this.body = Util.body(view);
        }

        String id() {
            return view.getMessageId().toString();
        }
    }

    /**
     * Receives (each call long-polls AWAIT) until {@code n} messages came or the deadline passed;
     * acks each one when {@code ack}. Returns what came, in arrival order.
     */
    static List<Got> receive(SimpleConsumer c, int n, Duration invisible, long timeoutMs, boolean ack)
        throws ClientException {
        List<Got> out = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (out.size() < n && System.currentTimeMillis() < deadline) {
            List<MessageView> got = c.receive(Math.min(32, n - out.size()), invisible);
            long at = System.currentTimeMillis();
            for (MessageView v : got) {
                out.add(new Got(v, at));
                if (ack) {
                    c.ack(v);
                }
            }
        }
        return out;
    }

    /**
     * Receives for {@code windowMs} (whole long polls) and returns whatever came; for checks that
     * nothing (more) is delivered.
     */
    static List<Got> drain(SimpleConsumer c, Duration invisible, long windowMs, boolean ack) throws ClientException {
        List<Got> out = new ArrayList<>();
        long end = System.currentTimeMillis() + windowMs;
        while (System.currentTimeMillis() < end) {
            for (MessageView v : c.receive(32, invisible)) {
                out.add(new Got(v, System.currentTimeMillis()));
                if (ack) {
                    c.ack(v);
                }
            }
        }
        return out;
    }

    /** Polls {@code done} every 50 ms until true or the deadline passed. */
    static boolean await(long timeoutMs, java.util.function.BooleanSupplier done) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < deadline) {
            if (done.getAsBoolean()) {
                return true;
            }
            Thread.sleep(50);
        }
        return done.getAsBoolean();
    }

    private static final Pattern CODE = Pattern.compile("response-code=(\\d+)");

    /** The status code a client exception carries ("[request-id=..., response-code=N]"), or -1. */
    static int code(Throwable t) {
        for (Throwable x = t; x != null; x = x.getCause()) {
            Matcher m = CODE.matcher(String.valueOf(x.getMessage()));
            if (m.find()) {
                return Integer.parseInt(m.group(1));
            }
        }
        return -1;
    }

    /** User properties of a received message, sorted (the client keeps system ones apart). */
    static Map<String, String> props(MessageView v) {
        return new TreeMap<>(v.getProperties());
    }

    static List<String> keys(MessageView v) {
        return new ArrayList<>(new TreeSet<>(v.getKeys()));
    }

    static List<String> bodies(List<Got> gs) {
        List<String> out = new ArrayList<>();
        for (Got g : gs) {
            out.add(g.body);
        }
        return out;
    }
}
