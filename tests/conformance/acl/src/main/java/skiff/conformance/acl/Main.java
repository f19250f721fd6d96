package skiff.conformance.acl;

import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The ACL conformance scenarios (tests/conformance/acl.sh): the same users and rights on both
 * brokers, the super user {@code rocketmq} and {@code alice}, who may publish and subscribe to
 * {@code AclTopic} and subscribe with {@code GID_acl}, nothing else.
 *
 * <pre>
 *   java -cp ... skiff.conformance.acl.Main --namesrv 127.0.0.1:P --grpc 127.0.0.1:G
 *       [--wait-file FILE] [--only a,b] [--list]
 * </pre>
 *
 * First, signed as the super user (DefaultMQAdminExt with AclClientRPCHook), it creates the topics
 * AclTopic and AclDenied (4 queues, +message.type=NORMAL) and the groups GID_acl and
 * GID_acl_denied on the broker the name server knows, and waits until both topics are routed.
 * Then it waits for --wait-file (acl.sh creates it once alice and her ACL exist) and runs the
 * remoting scenarios one after the other beside the gRPC ones (grpc_acl_allowed after
 * acl_allowed_send_and_consume, which share GID_acl). Prints {@code SCENARIOS name...}, then per
 * scenario {@code PASS name (secs): observed} or {@code FAIL name (secs): failures || observed:
 * ...}. Every remoting response is logged to stderr as {@code WIRE scenario req=CODE resp=CODE
 * remark=...} (which requests the broker refused, and with what).
 */
public final class Main {
    private Main() {}

    static final String ROOT_AK = "rocketmq";
    static final String ROOT_SK = "12345678";
    static final String ALICE_AK = "alice";
    static final String ALICE_SK = "alice-secret-1";
    static final String TOPIC = "AclTopic";
    static final String DENIED_TOPIC = "AclDenied";
    static final String GROUP = "GID_acl";
    static final String DENIED_GROUP = "GID_acl_denied";
    /** ResponseCode.NO_PERMISSION. */
    static final int NO_PERMISSION = 16;

    static final List<String> REMOTING = Arrays.asList("acl_allowed_send_and_consume", "acl_denied_topic",
        "acl_denied_group", "acl_wrong_secret", "acl_unsigned");
    static final List<String> GRPC = Arrays.asList("grpc_acl_denied_topic", "grpc_acl_wrong_secret",
        "grpc_acl_allowed");

    static String namesrv;
    static String grpcEndpoint;
    static final String RUN = Long.toString(System.currentTimeMillis() % 100_000_000L, 36);
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    public static void main(String[] args) throws Exception {
        String waitFile = null;
        List<String> only = null;
        boolean list = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--namesrv": namesrv = args[++i]; break;
                case "--grpc": grpcEndpoint = args[++i]; break;
                case "--wait-file": waitFile = args[++i]; break;
                case "--only": only = Arrays.asList(args[++i].split(",")); break;
                case "--list": list = true; break;
                default:
                    System.err.println("unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        List<String> all = new ArrayList<>(REMOTING);
        all.addAll(GRPC);
        if (list) {
            System.out.println("SCENARIOS " + String.join(" ", all));
            return;
        }
        List<String> chosen = new ArrayList<>();
        for (String n : all) {
            if (only == null || only.contains(n)) {
                chosen.add(n);
            }
        }
        System.out.println("SCENARIOS " + String.join(" ", chosen));
        System.out.flush();
        if (namesrv == null || grpcEndpoint == null) {
            System.err.println("--namesrv and --grpc are required");
            System.exit(2);
        }

        long t0 = System.currentTimeMillis();
        try {
            setup();
        } catch (Exception e) {
            System.out.println("SETUP FAILED: " + chain(e));
            System.out.flush();
            System.exit(1);
        }
        System.err.printf("setup (as the super user) took %.1fs%n", (System.currentTimeMillis() - t0) / 1000.0);
        if (waitFile != null) {
            Path p = Paths.get(waitFile);
            long deadline = System.currentTimeMillis() + 180_000;
            while (!Files.exists(p) && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            if (!Files.exists(p)) {
                System.out.println("SETUP FAILED: " + waitFile + " did not appear (users and ACLs not created)");
                System.exit(1);
            }
        }

        // Two tracks: remoting scenarios in order, gRPC scenarios in order; grpc_acl_allowed waits
        // until acl_allowed_send_and_consume is over (both consume GID_acl).
        CountDownLatch remotingAllowedDone = new CountDownLatch(1);
        List<String> r = new ArrayList<>(REMOTING);
        r.retainAll(chosen);
        List<String> g = new ArrayList<>(GRPC);
        g.retainAll(chosen);
        ExecutorService tracks = Executors.newFixedThreadPool(2);
        List<Future<Integer>> fs = new ArrayList<>();
        fs.add(tracks.submit(() -> {
            int failed = 0;
            try {
                for (String n : r) {
                    failed += runOne(n) ? 0 : 1;
                    if (n.equals("acl_allowed_send_and_consume")) {
                        remotingAllowedDone.countDown();
                    }
                }
            } finally {
                remotingAllowedDone.countDown();
            }
            return failed;
        }));
        fs.add(tracks.submit(() -> {
            int failed = 0;
            for (String n : g) {
                if (n.equals("grpc_acl_allowed")) {
                    remotingAllowedDone.await(120, TimeUnit.SECONDS);
                }
                failed += runOne(n) ? 0 : 1;
            }
            return failed;
        }));
        int failed = 0;
        for (Future<Integer> f : fs) {
            failed += f.get();
        }
        System.out.flush();
        // Client threads of failed scenarios may linger: exit explicitly.
        System.exit(failed == 0 ? 0 : 1);
    }

    // ---- setup ----------------------------------------------------------------------------------

    static RPCHook hook(String ak, String sk) {
        return new AclClientRPCHook(new SessionCredentials(ak, sk));
    }

    static String brokerAddr;

    /** Topics and groups, created by the super user. */
    static void setup() throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt(new Logged("setup", hook(ROOT_AK, ROOT_SK)), 10_000);
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("acl_admin_" + UUID.randomUUID().toString().substring(0, 8));
        admin.start();
        try {
            long deadline = System.currentTimeMillis() + 30_000;
            while (brokerAddr == null) {
                ClusterInfo ci = admin.examineBrokerClusterInfo();
                for (BrokerData bd : ci.getBrokerAddrTable().values()) {
                    String a = bd.getBrokerAddrs().get(0L);
                    if (a != null) {
                        brokerAddr = a;
                        break;
                    }
                }
                if (brokerAddr == null) {
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("no master broker in " + ci.getBrokerAddrTable());
                    }
                    Thread.sleep(200);
                }
            }
            for (String t : new String[] {TOPIC, DENIED_TOPIC}) {
                TopicConfig tc = new TopicConfig(t, 4, 4, 6);
                Map<String, String> attrs = new HashMap<>();
                attrs.put("+message.type", "NORMAL");
                tc.setAttributes(attrs);
                admin.createAndUpdateTopicConfig(brokerAddr, tc);
            }
            for (String gname : new String[] {GROUP, DENIED_GROUP}) {
                SubscriptionGroupConfig gc = new SubscriptionGroupConfig();
                gc.setGroupName(gname);
                admin.createAndUpdateSubscriptionGroupConfig(brokerAddr, gc);
            }
            for (String t : new String[] {TOPIC, DENIED_TOPIC}) {
                Exception last = null;
                boolean routed = false;
                deadline = System.currentTimeMillis() + 15_000;
                while (!routed && System.currentTimeMillis() < deadline) {
                    try {
                        routed = !admin.examineTopicRouteInfo(t).getQueueDatas().isEmpty();
                    } catch (Exception e) {
                        last = e;
                    }
                    if (!routed) {
                        Thread.sleep(200);
                    }
                }
                if (!routed) {
                    throw new IllegalStateException("topic " + t + " not routed 15 s after creation", last);
                }
            }
        } finally {
            admin.shutdown();
        }
    }

    // ---- running --------------------------------------------------------------------------------

    /** What one scenario saw and what went wrong. */
    static final class Ctx {
        final String name;
        final List<String> failures = Collections.synchronizedList(new ArrayList<>());
        final List<String> observed = Collections.synchronizedList(new ArrayList<>());
        final List<AutoCloseable> closers = Collections.synchronizedList(new ArrayList<>());

        Ctx(String name) {
            this.name = name;
        }

        void note(String s) {
            observed.add(s);
        }

        boolean check(boolean ok, String what) {
            if (!ok) {
                failures.add(what);
            }
            return ok;
        }

        void eq(String what, Object expected, Object actual) {
            if (!java.util.Objects.equals(expected, actual)) {
                failures.add(what + ": expected " + expected + ", observed " + actual);
            }
        }

        <T extends AutoCloseable> T closeLater(T c) {
            closers.add(c);
            return c;
        }

        void closeAll() {
            List<AutoCloseable> cs;
            synchronized (closers) {
                cs = new ArrayList<>(closers);
                closers.clear();
            }
            for (int i = cs.size() - 1; i >= 0; i--) {
                try {
                    cs.get(i).close();
                } catch (Exception e) {
                    // a client that already failed: nothing to report
                }
            }
        }
    }

    interface Body {
        void run(Ctx ctx) throws Exception;
    }

    static Body body(String name) {
        switch (name) {
            case "acl_allowed_send_and_consume": return Main::aclAllowedSendAndConsume;
            case "acl_denied_topic": return Main::aclDeniedTopic;
            case "acl_denied_group": return Main::aclDeniedGroup;
            case "acl_wrong_secret": return Main::aclWrongSecret;
            case "acl_unsigned": return Main::aclUnsigned;
            case "grpc_acl_allowed": return Main::grpcAclAllowed;
            case "grpc_acl_denied_topic": return Main::grpcAclDeniedTopic;
            case "grpc_acl_wrong_secret": return Main::grpcAclWrongSecret;
            default: throw new IllegalArgumentException(name);
        }
    }

    static boolean runOne(String name) {
        Ctx ctx = new Ctx(name);
        long t0 = System.currentTimeMillis();
        ExecutorService ex = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "scenario-" + name);
            t.setDaemon(true);
            return t;
        });
        try {
            Future<?> f = ex.submit(() -> {
                body(name).run(ctx);
                return null;
            });
            f.get(60, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            ctx.failures.add("scenario timed out after 60s");
        } catch (java.util.concurrent.ExecutionException e) {
            ctx.failures.add("exception: " + chain(e.getCause()));
        } catch (InterruptedException e) {
            ctx.failures.add("interrupted");
        } finally {
            ex.shutdownNow();
            ctx.closeAll();
        }
        double secs = (System.currentTimeMillis() - t0) / 1000.0;
        String obs = String.join("; ", ctx.observed);
        String line = ctx.failures.isEmpty()
            ? String.format("PASS %s (%.1fs): %s", name, secs, obs)
            : String.format("FAIL %s (%.1fs): %s%s", name, secs, String.join(" | ", ctx.failures),
                obs.isEmpty() ? "" : " || observed: " + obs);
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
        return ctx.failures.isEmpty();
    }

    /** An exception and its causes, one line. */
    static String chain(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (int depth = 0; t != null && depth < 4; depth++, t = t.getCause()) {
            if (depth > 0) {
                sb.append(" <- caused by ");
            }
            sb.append(String.valueOf(t).replaceAll("\\s*\\n\\s*", " ").trim());
        }
        return sb.toString();
    }

    /** Logs each remoting response (request code, response code, remark) after the inner hook. */
    static final class Logged implements RPCHook {
        private final String scenario;
        private final RPCHook inner;
        private static final PrintStream OUT = System.err;

        Logged(String scenario, RPCHook inner) {
            this.scenario = scenario;
            this.inner = inner;
        }

        @Override
        public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
            if (inner != null) {
                inner.doBeforeRequest(remoteAddr, request);
            }
        }

        @Override
        public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
            if (inner != null) {
                inner.doAfterResponse(remoteAddr, request, response);
            }
            if (response != null) {
                OUT.printf("WIRE %s %s req=%d resp=%d remark=%s%n", scenario, remoteAddr, request.getCode(),
                    response.getCode(), String.valueOf(response.getRemark()).replace('\n', ' '));
            }
        }
    }

    // ---- remoting scenarios -------------------------------------------------------------------

    static String instance() {
        return "acl" + UUID.randomUUID().toString().substring(0, 8);
    }

    /** A started producer signed with (ak, sk), or unsigned when ak is null. */
    static DefaultMQProducer producer(Ctx ctx, String ak, String sk) throws MQClientException {
        DefaultMQProducer p = new DefaultMQProducer("PID_acl_" + ctx.name,
            new Logged(ctx.name, ak == null ? null : hook(ak, sk)));
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(instance());
        p.setSendMsgTimeout(10_000);
        p.start();
        ctx.closeLater(p::shutdown);
        return p;
    }

    /**
     * The response code a remoting client exception carries: the broker's code in the first
     * MQBrokerException of the chain, else the MQClientException's code, else -1.
     */
    static int remotingCode(Throwable t) {
        for (Throwable x = t; x != null; x = x.getCause()) {
            if (x instanceof MQBrokerException) {
                return ((MQBrokerException) x).getResponseCode();
            }
        }
        for (Throwable x = t; x != null; x = x.getCause()) {
            if (x instanceof MQClientException && ((MQClientException) x).getResponseCode() != 0) {
                return ((MQClientException) x).getResponseCode();
            }
        }
        return -1;
    }

    static String brokerRemark(Throwable t) {
        for (Throwable x = t; x != null; x = x.getCause()) {
            if (x instanceof MQBrokerException) {
                return ((MQBrokerException) x).getErrorMessage();
            }
        }
        return null;
    }

    private static DefaultMQPullConsumer reader;

    /**
     * The bodies stored in the topic: PULL_MESSAGE from offset 0 of each queue, signed as the super
     * user. A refused send must leave nothing behind.
     */
    static synchronized Set<String> storedBodies(String topic) throws Exception {
        if (reader == null) {
            reader = new DefaultMQPullConsumer("GID_acl_reader", new Logged("reader", hook(ROOT_AK, ROOT_SK)));
            reader.setNamesrvAddr(namesrv);
            reader.setInstanceName(instance());
            reader.start();
        }
        Set<String> out = new TreeSet<>();
        for (MessageQueue mq : reader.fetchSubscribeMessageQueues(topic)) {
            long offset = 0;
            while (true) {
                PullResult r = reader.pull(mq, "*", offset, 32, 5000);
                if (r.getPullStatus() != PullStatus.FOUND) {
                    break;
                }
                for (MessageExt m : r.getMsgFoundList()) {
                    out.add(new String(m.getBody(), StandardCharsets.UTF_8));
                }
                offset = r.getNextBeginOffset();
            }
        }
        return out;
    }

    /** Checks (as the super user) that a refused message was not stored. */
    static void notStored(Ctx ctx, String topic, String body) throws Exception {
        boolean stored = storedBodies(topic).contains(body);
        ctx.check(!stored, "the refused message was stored in " + topic);
        if (!stored) {
            ctx.note("nothing stored in " + topic);
        }
    }

    /** A send that must be refused with NO_PERMISSION; notes what the client threw. */
    static void expectSendRefused(Ctx ctx, DefaultMQProducer p, String topic) throws Exception {
        String body = "acl-refused-" + ctx.name + "-" + RUN;
        try {
            SendResult r = p.send(new Message(topic, "TagA", utf8(body)));
            ctx.check(false, "send to " + topic + " was accepted: " + r);
        } catch (Exception e) {
            int code = remotingCode(e);
            ctx.note("send threw " + e.getClass().getSimpleName()
                + (e instanceof MQClientException ? " (responseCode " + ((MQClientException) e).getResponseCode() + ")" : "")
                + ", broker code " + code + ", remark \"" + brokerRemark(e) + "\"");
            ctx.eq("response code of the refused send", NO_PERMISSION, code);
        }
        notStored(ctx, topic, body);
    }

    /** alice sends 3 messages to AclTopic and consumes them with GID_acl (lite pull consumer). */
    static void aclAllowedSendAndConsume(Ctx ctx) throws Exception {
        DefaultMQProducer p = producer(ctx, ALICE_AK, ALICE_SK);
        Set<String> sent = new TreeSet<>();
        for (int i = 0; i < 3; i++) {
            String body = "acl-allowed-" + RUN + "-" + i;
            SendResult r = p.send(new Message(TOPIC, "TagA", utf8(body)));
            ctx.eq("send status of message " + i, SendStatus.SEND_OK, r.getSendStatus());
            sent.add(body);
        }
        ctx.note("3 sends SEND_OK");
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(GROUP, new Logged(ctx.name, hook(ALICE_AK, ALICE_SK)));
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(instance());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPollTimeoutMillis(1000);
        c.subscribe(TOPIC, "*");
        c.start();
        ctx.closeLater(c::shutdown);
        Set<String> got = new TreeSet<>();
        int other = 0;
        long deadline = System.currentTimeMillis() + 30_000;
        while (!got.containsAll(sent) && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll()) {
                String b = new String(m.getBody(), StandardCharsets.UTF_8);
                if (sent.contains(b)) {
                    got.add(b);
                } else {
                    other++;
                }
            }
        }
        c.commitSync(); // the gRPC scenario consumes GID_acl next: leave nothing behind
        ctx.eq("messages consumed by " + GROUP, sent, got);
        ctx.note("consumed " + got.size() + " of 3 with " + GROUP + (other > 0 ? " (+" + other + " others)" : ""));
    }

    static void aclDeniedTopic(Ctx ctx) throws Exception {
        expectSendRefused(ctx, producer(ctx, ALICE_AK, ALICE_SK), DENIED_TOPIC);
    }

    /** PULL_MESSAGE of AclTopic (alice may subscribe) for GID_acl_denied (she may not). */
    static void aclDeniedGroup(Ctx ctx) throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(DENIED_GROUP, new Logged(ctx.name, hook(ALICE_AK, ALICE_SK)));
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(instance());
        c.start();
        ctx.closeLater(c::shutdown);
        Set<MessageQueue> mqs = c.fetchSubscribeMessageQueues(TOPIC);
        ctx.eq("queues of " + TOPIC, 4, mqs.size());
        MessageQueue mq = new TreeSet<>(mqs).first();
        try {
            PullResult r = c.pull(mq, "*", 0, 32, 5000);
            ctx.check(false, "pull with " + DENIED_GROUP + " was answered: " + r);
        } catch (Exception e) {
            int code = remotingCode(e);
            ctx.note("pull threw " + e.getClass().getSimpleName() + ", code " + code
                + ", remark \"" + brokerRemark(e) + "\"");
            ctx.eq("response code of the refused pull", NO_PERMISSION, code);
        }
    }

    static void aclWrongSecret(Ctx ctx) throws Exception {
        expectSendRefused(ctx, producer(ctx, ALICE_AK, "not-" + ALICE_SK), TOPIC);
    }

    static void aclUnsigned(Ctx ctx) throws Exception {
        expectSendRefused(ctx, producer(ctx, null, null), TOPIC);
    }

    // ---- gRPC scenarios -----------------------------------------------------------------------

    static ClientConfiguration grpcConfig(String ak, String sk) {
        return ClientConfiguration.newBuilder()
            .setEndpoints(grpcEndpoint)
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10))
            .setCredentialProvider(new StaticSessionCredentialsProvider(ak, sk))
            .build();
    }

    static Producer grpcProducer(Ctx ctx, String ak, String sk, String... topics) throws ClientException {
        var b = PROVIDER.newProducerBuilder().setClientConfiguration(grpcConfig(ak, sk));
        if (topics.length > 0) {
            b.setTopics(topics);
        }
        return ctx.closeLater(b.build());
    }

    static final Pattern GRPC_CODE = Pattern.compile("response-code=(\\d+)");

    /** The status code a gRPC client exception carries ("[request-id=..., response-code=N]"), or -1. */
    static int grpcCode(Throwable t) {
        for (Throwable x = t; x != null; x = x.getCause()) {
            Matcher m = GRPC_CODE.matcher(String.valueOf(x.getMessage()));
            if (m.find()) {
                return Integer.parseInt(m.group(1));
            }
        }
        return -1;
    }

    /** A gRPC send that must be refused: the exception's class and status code. */
    static void expectGrpcSendRefused(Ctx ctx, Producer p, String topic, String expectedClass, int expectedCode)
        throws Exception {
        String body = "acl-refused-" + ctx.name + "-" + RUN;
        try {
            SendReceipt r = p.send(PROVIDER.newMessageBuilder().setTopic(topic).setTag("TagA")
                .setBody(utf8(body)).build());
            ctx.check(false, "send to " + topic + " was accepted: " + r.getMessageId());
        } catch (ClientException e) {
            ctx.note("send threw " + e.getClass().getName() + ": " + String.valueOf(e.getMessage()).replace('\n', ' '));
            ctx.eq("exception class", expectedClass, e.getClass().getSimpleName());
            ctx.eq("status code", expectedCode, grpcCode(e));
        }
        notStored(ctx, topic, body);
    }

    /** alice sends to AclTopic and receives the message with a SimpleConsumer of GID_acl. */
    static void grpcAclAllowed(Ctx ctx) throws Exception {
        Producer p = grpcProducer(ctx, ALICE_AK, ALICE_SK, TOPIC);
        String body = "acl-grpc-" + RUN;
        SendReceipt r = p.send(PROVIDER.newMessageBuilder().setTopic(TOPIC).setTag("TagA").setBody(utf8(body)).build());
        String id = r.getMessageId().toString();
        ctx.note("sent " + id);
        SimpleConsumer c = ctx.closeLater(PROVIDER.newSimpleConsumerBuilder()
            .setClientConfiguration(grpcConfig(ALICE_AK, ALICE_SK))
            .setConsumerGroup(GROUP)
            .setSubscriptionExpressions(Collections.singletonMap(TOPIC, FilterExpression.SUB_ALL))
            .setAwaitDuration(Duration.ofSeconds(5))
            .build());
        boolean found = false;
        int other = 0;
        long deadline = System.currentTimeMillis() + 30_000;
        while (!found && System.currentTimeMillis() < deadline) {
            for (MessageView v : c.receive(16, Duration.ofSeconds(15))) {
                ByteBuffer bb = v.getBody().duplicate();
                byte[] bytes = new byte[bb.remaining()];
                bb.get(bytes);
                if (body.equals(new String(bytes, StandardCharsets.UTF_8))) {
                    found = true;
                    ctx.eq("message id", id, v.getMessageId().toString());
                } else {
                    other++;
                }
                c.ack(v);
            }
        }
        ctx.check(found, "the message was not received by " + GROUP + " within 30 s");
        ctx.note("received and acked by " + GROUP + (other > 0 ? " (+" + other + " others)" : ""));
    }

    static void grpcAclDeniedTopic(Ctx ctx) throws Exception {
        expectGrpcSendRefused(ctx, grpcProducer(ctx, ALICE_AK, ALICE_SK), DENIED_TOPIC,
            "UnauthorizedException", 40100);
    }

    static void grpcAclWrongSecret(Ctx ctx) throws Exception {
        expectGrpcSendRefused(ctx, grpcProducer(ctx, ALICE_AK, "not-" + ALICE_SK), TOPIC,
            "UnauthorizedException", 40100);
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
