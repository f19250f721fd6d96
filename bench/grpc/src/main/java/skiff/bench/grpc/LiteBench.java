package skiff.bench.grpc;

import static skiff.bench.grpc.GrpcBench.fmt;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Lite topics at scale (RocketMQ 5.5), through the 5.x gRPC Java client, the same program against
 * any broker (bench/lite-bench.sh runs it against Apache 5.5.0 in cluster mode and skiff); the
 * shape of {@code examples/many_queues.rs --mode lite}.
 *
 * <pre>
 *   java -cp ... skiff.bench.grpc.LiteBench --endpoint 127.0.0.1:G --namesrv 127.0.0.1:N
 *       --lite-topics N [--threads 16] [--consumers 4] [--lite-batch 1000] [--idle-secs 60]
 *       [--lite-quota Q] [--pids P1,P2] [--clk-tck 100]
 * </pre>
 *
 * Creates the LITE parent topic {@code ScaleLite} (4 queues) and the group {@code ScaleLiteGroup}
 * bound to it (Shared) over remoting (the gRPC protocol creates neither); then
 * <ul>
 *   <li>first: one Producer shared by K threads sends one message (blocking {@code send}) to each
 *       of N distinct lite topics, so each send makes a new lite topic: broker CPU per message;</li>
 *   <li>existing: N2 = min(N, 20000) more messages, to lite topics spread over those N, which
 *       already exist: broker CPU per message;</li>
 *   <li>consume: C LitePushConsumers of the group, each with its share of the lite topics, B at a
 *       time: subscribeLite each of the batch, wait until every message of the batch arrived
 *       (the listener records it and answers SUCCESS), unsubscribeLite the batch. msgs/s and
 *       broker CPU per received message. A batch with no new message for 60 s fails the run;</li>
 *   <li>idle: the clients close; RSS read then and after --idle-secs.</li>
 * </ul>
 * Broker CPU: utime + stime of /proc/PID/stat summed over --pids, read at the phase edges. RSS:
 * VmRSS summed over --pids, sampled every 100 ms over the whole run for the peak. Prints one line
 * {@code RESULT key=value ...}; a failure prints {@code FAIL phase=... ...} and exits 1.
 */
public final class LiteBench {
    private LiteBench() {}

    static final String PARENT = "ScaleLite";
    static final String GROUP = "ScaleLiteGroup";
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    /** A batch whose messages stop arriving for this long fails the run. */
    static final long STALL_MS = 60_000;

    static List<Long> pids = new ArrayList<>();
    static long clkTck = 100;
    static final AtomicLong peakRssKib = new AtomicLong();

    public static void main(String[] args) throws Exception {
        String endpoint = null;
        String namesrv = null;
        int liteTopics = 10_000;
        int threads = 16;
        int consumers = 4;
        int batch = 1000;
        int idleSecs = 60;
        int quota = 0;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--endpoint": endpoint = args[++i]; break;
                case "--namesrv": namesrv = args[++i]; break;
                case "--lite-topics": liteTopics = Integer.parseInt(args[++i]); break;
                case "--threads": threads = Integer.parseInt(args[++i]); break;
                case "--consumers": consumers = Integer.parseInt(args[++i]); break;
                case "--lite-batch": batch = Integer.parseInt(args[++i]); break;
                case "--idle-secs": idleSecs = Integer.parseInt(args[++i]); break;
                case "--lite-quota": quota = Integer.parseInt(args[++i]); break;
                case "--pids": pids.addAll(GrpcBench.parsePids(args[++i])); break;
                case "--clk-tck": clkTck = Long.parseLong(args[++i]); break;
                default:
                    System.err.println("unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        if (endpoint == null || namesrv == null || liteTopics < 1 || threads < 1 || consumers < 1 || batch < 1) {
            System.err.println("--endpoint and --namesrv are required; counts must be positive");
            System.exit(2);
        }
        final int n = liteTopics;
        final int n2 = Math.min(n, 20_000);
        Thread sampler = new Thread(LiteBench::sampleRss, "rss-sampler");
        sampler.setDaemon(true);
        sampler.start();

        setUp(namesrv, quota);
        ClientConfiguration cfg = ClientConfiguration.newBuilder().setEndpoints(endpoint).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(30)).build();
        Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(cfg).setTopics(PARENT).build();
        log("set up; rss %.1f MiB", rssKib() / 1024.0);

        // What every lite topic is to deliver: 1, plus 1 for those the existing phase sends to.
        int[] expected = new int[n];
        java.util.Arrays.fill(expected, 1);
        for (int j = 0; j < n2; j++) {
            expected[existingTarget(j, n, n2)]++;
        }

        // ---- first: one message into each new lite topic ----
        long cpu0 = cpu();
        long t0 = System.nanoTime();
        sendAll("first", producer, threads, n, i -> i, 0);
        long firstNs = System.nanoTime() - t0;
        long cpu1 = cpu();
        log("first: %d lite topics in %.1f s; rss %.1f MiB", n, firstNs / 1e9, rssKib() / 1024.0);

        // ---- existing: more messages into lite topics that hold one already ----
        long t1 = System.nanoTime();
        sendAll("existing", producer, threads, n2, j -> existingTarget(j, n, n2), n);
        long existingNs = System.nanoTime() - t1;
        long cpu2 = cpu();
        log("existing: %d messages in %.1f s", n2, existingNs / 1e9);

        // ---- consume ----
        final int total = n + n2;
        // A message's number: i for the first into lite topic i, n + j for the j-th existing one.
        AtomicLongArray seen = new AtomicLongArray((total + 63) / 64);
        AtomicIntegerArray received = new AtomicIntegerArray(n);
        AtomicLong unique = new AtomicLong();
        AtomicLong duplicates = new AtomicLong();
        AtomicReference<String> failure = new AtomicReference<>();
        List<LitePushConsumer> lcs = new ArrayList<>();
        for (int c = 0; c < consumers; c++) {
            lcs.add(PROVIDER.newLitePushConsumerBuilder().setClientConfiguration(cfg).setConsumerGroup(GROUP)
                .bindTopic(PARENT)
                .setMessageListener(v -> {
                    record(v, seen, received, unique, duplicates, failure, n, total);
                    return ConsumeResult.SUCCESS;
                })
                .build());
        }
        long t2 = System.nanoTime();
        List<Thread> ts = new ArrayList<>();
        for (int c = 0; c < consumers; c++) {
            final LitePushConsumer lc = lcs.get(c);
            final int from = (int) ((long) n * c / consumers);
            final int to = (int) ((long) n * (c + 1) / consumers);
            final int b = batch;
            Thread th = new Thread(() -> {
                try {
                    for (int start = from; start < to && failure.get() == null; start += b) {
                        int end = Math.min(to, start + b);
                        for (int i = start; i < end; i++) {
                            lc.subscribeLite(liteName(i));
                        }
                        awaitBatch(start, end, expected, received, failure);
                        for (int i = start; i < end; i++) {
                            lc.unsubscribeLite(liteName(i));
                        }
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, "consumer " + lc + ": " + e);
                    e.printStackTrace();
                }
            }, "consume-" + c);
            ts.add(th);
            th.start();
        }
        joinReporting(ts, () -> String.format("consume: %d of %d received", unique.get(), total));
        long consumeNs = System.nanoTime() - t2;
        long cpu3 = cpu();
        if (failure.get() != null) {
            fail("consume", unique.get() + " of " + total + " received: " + failure.get());
        }
        if (unique.get() != total) {
            fail("consume", unique.get() + " of " + total + " received");
        }
        log("consume: %d messages in %.1f s", total, consumeNs / 1e9);

        // ---- idle ----
        // Clients closed first, so what stays in the broker is no client's.
        for (LitePushConsumer lc : lcs) {
            closeQuietly(lc);
        }
        closeQuietly(producer);
        long rssAfter = rssKib();
        long cpuIdle0 = cpu();
        long idleT0 = System.nanoTime();
        Thread.sleep(idleSecs * 1000L);
        long idleRss = rssKib();
        double idleCpuPct = (cpu() - cpuIdle0) / ((System.nanoTime() - idleT0) / 1e3) * 100;

        Map<String, String> r = new LinkedHashMap<>();
        r.put("lite_topics", String.valueOf(n));
        r.put("existing_msgs", String.valueOf(n2));
        r.put("threads", String.valueOf(threads));
        r.put("consumers", String.valueOf(consumers));
        r.put("lite_batch", String.valueOf(batch));
        double firstUs = (cpu1 - cpu0) / (double) n;
        double existingUs = (cpu2 - cpu1) / (double) n2;
        r.put("first_us", fmt(firstUs));
        r.put("existing_us", fmt(existingUs));
        r.put("first_over_existing", fmt(existingUs > 0 ? firstUs / existingUs : 0));
        r.put("first_msgs_s", fmt(n / (firstNs / 1e9)));
        r.put("existing_msgs_s", fmt(n2 / (existingNs / 1e9)));
        r.put("consume_msgs_s", fmt(total / (consumeNs / 1e9)));
        r.put("consume_us", fmt((cpu3 - cpu2) / (double) total));
        r.put("consume_secs", fmt(consumeNs / 1e9));
        r.put("duplicates", String.valueOf(duplicates.get()));
        r.put("peak_rss_mib", fmt(peakRssKib.get() / 1024.0));
        r.put("rss_after_consumers_mib", fmt(rssAfter / 1024.0));
        r.put("idle_rss_mib", fmt(idleRss / 1024.0));
        r.put("idle_secs", String.valueOf(idleSecs));
        r.put("idle_cpu_pct", fmt(idleCpuPct));
        StringBuilder sb = new StringBuilder("RESULT");
        r.forEach((k, v) -> sb.append(' ').append(k).append('=').append(v));
        System.out.println(sb);
        System.out.flush();
        System.exit(0);
    }

    static String liteName(int i) {
        return "lite-" + i;
    }

    /** The lite topic the j-th existing-phase message goes to: spread evenly over the n. */
    static int existingTarget(int j, int n, int n2) {
        return (int) ((long) j * n / n2);
    }

    /**
     * Sends {@code count} messages from {@code threads} threads (thread t sends numbers t, t + K,
     * ...): message k goes to lite topic {@code target(k)} with body {@code base + k} (8 bytes).
     */
    static void sendAll(String phase, Producer producer, int threads, int count,
        java.util.function.IntUnaryOperator target, int base) throws Exception {
        AtomicReference<Throwable> failure = new AtomicReference<>();
        AtomicLong sent = new AtomicLong();
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int id = t;
            Thread th = new Thread(() -> {
                try {
                    for (int k = id; k < count && failure.get() == null; k += threads) {
                        byte[] body = ByteBuffer.allocate(8).putLong(0, base + k).array();
                        producer.send(PROVIDER.newMessageBuilder().setTopic(PARENT)
                            .setLiteTopic(liteName(target.applyAsInt(k))).setBody(body).build());
                        sent.incrementAndGet();
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            }, phase + "-" + t);
            ts.add(th);
            th.start();
        }
        joinReporting(ts, () -> String.format("%s: %d of %d sent", phase, sent.get(), count));
        if (failure.get() != null) {
            failure.get().printStackTrace();
            fail(phase, sent.get() + " of " + count + " sent: " + failure.get());
        }
    }

    /** The listener: counts each message number once, per lite topic. */
    static void record(MessageView v, AtomicLongArray seen, AtomicIntegerArray received, AtomicLong unique,
        AtomicLong duplicates, AtomicReference<String> failure, int n, int total) {
        String lite = v.getLiteTopic().orElse("");
        long num = v.getBody().duplicate().getLong(0);
        int idx = lite.startsWith("lite-") ? Integer.parseInt(lite.substring(5)) : -1;
        if (idx < 0 || idx >= n || num < 0 || num >= total) {
            failure.compareAndSet(null, "unexpected message: lite topic '" + lite + "', number " + num);
            return;
        }
        int w = (int) (num >>> 6);
        long bit = 1L << (num & 63);
        long old = seen.getAndAccumulate(w, bit, (a, b) -> a | b);
        if ((old & bit) == 0) {
            received.incrementAndGet(idx);
            unique.incrementAndGet();
        } else {
            duplicates.incrementAndGet();
        }
    }

    /** Waits until lite topics [start, end) delivered all they hold; fails after a 60 s stall. */
    static void awaitBatch(int start, int end, int[] expected, AtomicIntegerArray received,
        AtomicReference<String> failure) throws InterruptedException {
        long got = -1;
        long progressAt = System.currentTimeMillis();
        while (failure.get() == null) {
            long now = 0;
            int firstMissing = -1;
            int missing = 0;
            for (int i = start; i < end; i++) {
                int r = received.get(i);
                now += r;
                if (r < expected[i]) {
                    missing++;
                    if (firstMissing < 0) {
                        firstMissing = i;
                    }
                }
            }
            if (missing == 0) {
                return;
            }
            if (now != got) {
                got = now;
                progressAt = System.currentTimeMillis();
            } else if (System.currentTimeMillis() - progressAt > STALL_MS) {
                failure.compareAndSet(null, "no message for " + STALL_MS / 1000 + " s in the batch of lite topics "
                    + start + ".." + (end - 1) + ": " + missing + " lite topics short, the first " + liteName(firstMissing)
                    + " (received " + received.get(firstMissing) + " of " + expected[firstMissing] + ")");
                return;
            }
            Thread.sleep(5);
        }
    }

    static void fail(String phase, String what) {
        System.out.println("FAIL phase=" + phase + " " + what.replace('\n', ' '));
        System.out.flush();
        System.exit(1);
    }

    static void closeQuietly(AutoCloseable c) {
        try {
            c.close();
        } catch (Exception e) {
            log("close: %s", e);
        }
    }

    static void log(String fmt, Object... args) {
        System.err.printf("[lite-bench %tT] %s%n", System.currentTimeMillis(), String.format(java.util.Locale.ROOT, fmt, args));
    }

    /** Samples the summed VmRSS every 100 ms for the peak. */
    static void sampleRss() {
        while (true) {
            try {
                long kib = rssKib();
                peakRssKib.accumulateAndGet(kib, Math::max);
                Thread.sleep(100);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    /** VmRSS (KiB) summed over --pids; a process gone counts 0. */
    static long rssKib() {
        long sum = 0;
        for (long pid : pids) {
            try {
                for (String line : Files.readAllLines(Path.of("/proc/" + pid + "/status"), StandardCharsets.UTF_8)) {
                    if (line.startsWith("VmRSS:")) {
                        sum += Long.parseLong(line.substring(6).trim().split("\\s+")[0]);
                    }
                }
            } catch (Exception e) {
                // gone
            }
        }
        return sum;
    }

    /** CPU microseconds (utime + stime) summed over --pids. */
    static long cpu() throws Exception {
        return GrpcBench.sum(GrpcBench.cpu(pids, clkTck));
    }

    /** Waits for every thread of {@code ts}, logging {@code progress} and the RSS every 10 s. */
    static void joinReporting(List<Thread> ts, java.util.function.Supplier<String> progress)
        throws InterruptedException {
        long lastLog = System.nanoTime();
        while (ts.stream().anyMatch(Thread::isAlive)) {
            Thread.sleep(100);
            if (System.nanoTime() - lastLog > 10_000_000_000L) {
                lastLog = System.nanoTime();
                log("%s; rss %.1f MiB", progress.get(), rssKib() / 1024.0);
            }
        }
    }

    /**
     * The LITE parent (4 queues) and its Shared group over remoting; waits until the parent is
     * routed. A positive quota sets the group's lite.sub.client.quota (the most lite topics one
     * client may subscribe at once); 0 leaves the broker's default.
     */
    static void setUp(String namesrv, int quota) throws Exception {
        DefaultMQAdminExt ext = new DefaultMQAdminExt("lite_bench_admin", 10_000);
        ext.setNamesrvAddr(namesrv);
        ext.setInstanceName("lite_bench_admin_" + System.nanoTime());
        ext.start();
        try {
            String addr = GrpcBench.masterAddress(ext, namesrv);
            TopicConfig tc = new TopicConfig(PARENT, 4, 4, 6);
            Map<String, String> attrs = new HashMap<>();
            attrs.put("+message.type", "LITE");
            tc.setAttributes(attrs);
            ext.createAndUpdateTopicConfig(addr, tc);
            SubscriptionGroupConfig g = new SubscriptionGroupConfig();
            g.setGroupName(GROUP);
            Map<String, String> gattrs = new HashMap<>();
            gattrs.put("+lite.bind.topic", PARENT);
            gattrs.put("+lite.sub.model", "Shared");
            if (quota > 0) {
                gattrs.put("+lite.sub.client.quota", String.valueOf(quota));
            }
            g.setAttributes(gattrs);
            ext.createAndUpdateSubscriptionGroupConfig(addr, g);
            GrpcBench.awaitRouted(ext, PARENT);
        } finally {
            ext.shutdown();
        }
    }
}
