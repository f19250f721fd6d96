package skiff.bench.grpc;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The gRPC row of bench/run.sh: one broker's RocketMQ 5 gRPC endpoint, the 5.x Java client.
 *
 * <pre>
 *   java -cp ... skiff.bench.grpc.GrpcBench --endpoint 127.0.0.1:G --namesrv 127.0.0.1:N
 *       --messages M [--threads K] [--consumers C] [--size 128] [--pids P1,P2] [--clk-tck 100]
 * </pre>
 *
 * Creates topic {@code bench_grpc} (4 queues, message.type NORMAL) and group
 * {@code bench_grpc_group} over remoting (the gRPC protocol creates neither); builds a
 * SimpleConsumer of the group and primes it with one empty receive (so the group's pop offsets
 * start at 0 on both brokers); then
 * <ul>
 *   <li>produce: one Producer shared by K threads, each sending M/K messages of SIZE bytes with
 *       the blocking {@code send} (bytes 0..8 the sequence number, the rest random): msgs/s and
 *       the send latency percentiles;</li>
 *   <li>drain: C threads, each {@code receive(32, 30 s)} then {@code ackAsync} of every message,
 *       waiting for the acks of a batch before the next receive; the clock stops when every
 *       sequence number has been acked once: msgs/s.</li>
 * </ul>
 * Broker CPU: utime + stime of /proc/PID/stat of every --pids process, read before and after each
 * phase; the client's own CPU likewise from /proc/self/stat. Prints one line
 * {@code RESULT key=value ...}.
 */
public final class GrpcBench {
    private GrpcBench() {}

    static final String TOPIC = "bench_grpc";
    static final String GROUP = "bench_grpc_group";
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    public static void main(String[] args) throws Exception {
        String endpoint = null;
        String namesrv = null;
        int messages = 100_000;
        int threads = 4;
        int consumers = 4;
        int size = 128;
        List<Long> pids = new ArrayList<>();
        long clkTck = 100;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--endpoint": endpoint = args[++i]; break;
                case "--namesrv": namesrv = args[++i]; break;
                case "--messages": messages = Integer.parseInt(args[++i]); break;
                case "--threads": threads = Integer.parseInt(args[++i]); break;
                case "--consumers": consumers = Integer.parseInt(args[++i]); break;
                case "--size": size = Integer.parseInt(args[++i]); break;
                case "--pids": pids.addAll(parsePids(args[++i])); break;
                case "--clk-tck": clkTck = Long.parseLong(args[++i]); break;
                default:
                    System.err.println("unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        if (endpoint == null || namesrv == null || messages % threads != 0 || size < 16) {
            System.err.println("--endpoint and --namesrv are required; --messages must be a multiple of --threads; --size >= 16");
            System.exit(2);
        }
        setUp(namesrv);
        ClientConfiguration cfg = ClientConfiguration.newBuilder().setEndpoints(endpoint).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(30)).build();

        SimpleConsumer consumer = PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(cfg)
            .setConsumerGroup(GROUP)
            .setSubscriptionExpressions(Collections.singletonMap(TOPIC, FilterExpression.SUB_ALL))
            .setAwaitDuration(Duration.ofSeconds(5)).build();
        // Priming: the first pop sets the new group's offsets (empty queues: 0).
        List<MessageView> early = consumer.receive(32, Duration.ofSeconds(30));
        if (!early.isEmpty()) {
            throw new IllegalStateException("the topic was not empty: " + early.size() + " messages");
        }
        Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(cfg).setTopics(TOPIC).build();

        // ---- produce ----
        final int perThread = messages / threads;
        final int sz = size;
        long[][] lat = new long[threads][perThread];
        AtomicReference<Throwable> failure = new AtomicReference<>();
        long[] b0 = cpu(pids, clkTck);
        long c0 = selfCpu(clkTck);
        long t0 = System.nanoTime();
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int id = t;
            Thread th = new Thread(() -> {
                java.util.SplittableRandom rnd = new java.util.SplittableRandom(id * 7919L + 1);
                byte[] body = new byte[sz];
                try {
                    for (int i = 0; i < perThread; i++) {
                        long seq = (long) id * perThread + i;
                        for (int j = 8; j < sz; j += 8) {
                            long r = rnd.nextLong();
                            for (int k = 0; k < 8 && j + k < sz; k++) {
                                body[j + k] = (byte) (r >>> (8 * k));
                            }
                        }
                        ByteBuffer.wrap(body).putLong(0, seq);
                        Message m = PROVIDER.newMessageBuilder().setTopic(TOPIC).setBody(body.clone()).build();
                        long s = System.nanoTime();
                        producer.send(m);
                        lat[id][i] = System.nanoTime() - s;
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            }, "send-" + t);
            ts.add(th);
            th.start();
        }
        for (Thread th : ts) {
            th.join();
        }
        long produceNs = System.nanoTime() - t0;
        long[] b1 = cpu(pids, clkTck);
        long c1 = selfCpu(clkTck);
        if (failure.get() != null) {
            throw new IllegalStateException("send failed", failure.get());
        }
        long[] all = new long[messages];
        for (int t = 0; t < threads; t++) {
            System.arraycopy(lat[t], 0, all, t * perThread, perThread);
        }
        Arrays.sort(all);

        // ---- drain ----
        final int total = messages;
        AtomicLongArray seen = new AtomicLongArray((total + 63) / 64);
        AtomicLong acked = new AtomicLong();
        AtomicLong deliveries = new AtomicLong();
        AtomicLong duplicates = new AtomicLong();
        AtomicLong lastAck = new AtomicLong();
        AtomicLong receives = new AtomicLong();
        AtomicLong emptyReceives = new AtomicLong();
        AtomicLong receiveNs = new AtomicLong();
        AtomicLong ackWaitNs = new AtomicLong();
        long d0 = System.nanoTime();
        List<Thread> cs = new ArrayList<>();
        for (int t = 0; t < consumers; t++) {
            Thread th = new Thread(() -> {
                try {
                    while (acked.get() < total && failure.get() == null) {
                        long rs = System.nanoTime();
                        List<MessageView> got = consumer.receive(32, Duration.ofSeconds(30));
                        long re = System.nanoTime();
                        if (acked.get() < total) {
                            receives.incrementAndGet();
                            receiveNs.addAndGet(re - rs);
                            if (got.isEmpty()) {
                                emptyReceives.incrementAndGet();
                            }
                        }
                        List<CompletableFuture<Void>> acks = new ArrayList<>(got.size());
                        for (MessageView v : got) {
                            acks.add(consumer.ackAsync(v));
                        }
                        for (int i = 0; i < got.size(); i++) {
                            acks.get(i).join();
                            if (i == got.size() - 1) {
                                ackWaitNs.addAndGet(System.nanoTime() - re);
                            }
                            deliveries.incrementAndGet();
                            long seq = got.get(i).getBody().duplicate().getLong(0);
                            if (seq < 0 || seq >= total) {
                                throw new IllegalStateException("unexpected sequence number " + seq);
                            }
                            int w = (int) (seq >>> 6);
                            long bit = 1L << (seq & 63);
                            long old = seen.getAndAccumulate(w, bit, (a, b) -> a | b);
                            if ((old & bit) == 0) {
                                acked.incrementAndGet();
                                lastAck.set(System.nanoTime());
                            } else {
                                duplicates.incrementAndGet();
                            }
                        }
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            }, "drain-" + t);
            cs.add(th);
            th.start();
        }
        // The clock stops at the last first-time ack; the receivers still polling then end
        // within their long poll (5 s), which is not counted.
        while (acked.get() < total && failure.get() == null) {
            Thread.sleep(2);
        }
        long drainNs = (acked.get() >= total ? lastAck.get() : System.nanoTime()) - d0;
        long[] b2 = cpu(pids, clkTck);
        long c2 = selfCpu(clkTck);
        if (failure.get() != null) {
            throw new IllegalStateException("drain failed after " + acked.get() + " acks", failure.get());
        }
        Map<String, String> r = new java.util.LinkedHashMap<>();
        r.put("messages", String.valueOf(messages));
        r.put("threads", String.valueOf(threads));
        r.put("consumers", String.valueOf(consumers));
        r.put("size", String.valueOf(size));
        r.put("produce_secs", fmt(produceNs / 1e9));
        r.put("produce_rate", fmt(messages / (produceNs / 1e9)));
        r.put("send_p50_ms", fmt(all[(int) Math.min(all.length - 1, Math.floor(0.50 * all.length))] / 1e6));
        r.put("send_p99_ms", fmt(all[(int) Math.min(all.length - 1, Math.floor(0.99 * all.length))] / 1e6));
        r.put("send_max_ms", fmt(all[all.length - 1] / 1e6));
        r.put("drain_secs", fmt(drainNs / 1e9));
        r.put("drain_rate", fmt(messages / (drainNs / 1e9)));
        r.put("duplicates", String.valueOf(duplicates.get()));
        long rc = Math.max(1, receives.get());
        r.put("receives", String.valueOf(receives.get()));
        r.put("empty_receives", String.valueOf(emptyReceives.get()));
        r.put("msgs_per_receive", fmt(deliveries.get() / (double) rc));
        r.put("receive_ms_mean", fmt(receiveNs.get() / 1e6 / rc));
        r.put("acks_ms_mean", fmt(ackWaitNs.get() / 1e6 / rc));
        r.put("broker_cpu_us_per_msg_produce", fmt(sum(b1) - sum(b0) > 0 ? (sum(b1) - sum(b0)) / (double) messages : 0));
        r.put("broker_cpu_us_per_msg_drain", fmt((sum(b2) - sum(b1)) / (double) messages));
        r.put("broker_cpu_us_per_msg", fmt((sum(b2) - sum(b0)) / (double) messages));
        r.put("client_cpu_us_per_msg_produce", fmt((c1 - c0) / (double) messages));
        r.put("client_cpu_us_per_msg_drain", fmt((c2 - c1) / (double) messages));
        StringBuilder sb = new StringBuilder("RESULT");
        r.forEach((k, v) -> sb.append(' ').append(k).append('=').append(v));
        System.out.println(sb);
        System.out.flush();
        // Closing the clients waits for the outstanding long polls; nothing more to measure.
        System.exit(0);
    }

    static String fmt(double d) {
        return String.format(java.util.Locale.ROOT, "%.3f", d);
    }

    static long sum(long[] a) {
        long s = 0;
        for (long x : a) {
            s += x;
        }
        return s;
    }

    /** The process ids of a --pids argument, comma separated (blanks skipped). */
    static List<Long> parsePids(String arg) {
        List<Long> out = new ArrayList<>();
        for (String p : arg.split(",")) {
            if (!p.isBlank()) {
                out.add(Long.parseLong(p.trim()));
            }
        }
        return out;
    }

    /** CPU microseconds (utime + stime) of each process. */
    static long[] cpu(List<Long> pids, long clkTck) throws Exception {
        long[] out = new long[pids.size()];
        for (int i = 0; i < pids.size(); i++) {
            out[i] = statCpu(Path.of("/proc/" + pids.get(i) + "/stat"), clkTck);
        }
        return out;
    }

    static long selfCpu(long clkTck) throws Exception {
        return statCpu(Path.of("/proc/self/stat"), clkTck);
    }

    static long statCpu(Path p, long clkTck) throws Exception {
        String s = Files.readString(p);
        // Fields after the command name (which is in parentheses and may hold spaces).
        String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
        // f[0] is field 3 (state): utime is field 14, stime field 15.
        long ticks = Long.parseLong(f[11]) + Long.parseLong(f[12]);
        return ticks * 1_000_000L / clkTck;
    }

    /** The master broker's address, once one is registered at the name server (30 s at most). */
    static String masterAddress(DefaultMQAdminExt ext, String namesrv) throws Exception {
        long deadline = System.currentTimeMillis() + 30_000;
        while (System.currentTimeMillis() < deadline) {
            try {
                ClusterInfo ci = ext.examineBrokerClusterInfo();
                for (BrokerData bd : ci.getBrokerAddrTable().values()) {
                    String addr = bd.getBrokerAddrs().get(0L);
                    if (addr != null) {
                        return addr;
                    }
                }
            } catch (Exception e) {
                // not registered yet
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("no broker registered at " + namesrv);
    }

    /** Waits until the name server routes {@code topic} (30 s at most). */
    static void awaitRouted(DefaultMQAdminExt ext, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + 30_000;
        while (System.currentTimeMillis() < deadline) {
            try {
                if (!ext.examineTopicRouteInfo(topic).getQueueDatas().isEmpty()) {
                    return;
                }
            } catch (Exception e) {
                // not routed yet
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("topic " + topic + " not routed 30 s after creation");
    }

    /** Topic (4 queues, NORMAL) and group over remoting, then waits until the topic is routed. */
    static void setUp(String namesrv) throws Exception {
        DefaultMQAdminExt ext = new DefaultMQAdminExt("bench_grpc_admin", 10_000);
        ext.setNamesrvAddr(namesrv);
        ext.setInstanceName("bench_grpc_admin_" + System.nanoTime());
        ext.start();
        try {
            String addr = masterAddress(ext, namesrv);
            TopicConfig tc = new TopicConfig(TOPIC, 4, 4, 6);
            Map<String, String> attrs = new HashMap<>();
            attrs.put("+message.type", "NORMAL");
            tc.setAttributes(attrs);
            ext.createAndUpdateTopicConfig(addr, tc);
            SubscriptionGroupConfig g = new SubscriptionGroupConfig();
            g.setGroupName(GROUP);
            ext.createAndUpdateSubscriptionGroupConfig(addr, g);
            awaitRouted(ext, TOPIC);
        } finally {
            ext.shutdown();
        }
    }
}
