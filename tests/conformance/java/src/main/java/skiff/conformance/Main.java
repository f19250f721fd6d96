package skiff.conformance;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Runs conformance scenarios against the name server at --namesrv.
 *
 * <pre>
 *   java -cp ... skiff.conformance.Main --namesrv 127.0.0.1:9876 [--only a,b] [--parallel 4] [--list]
 *       [--core] [--prefix v4_]
 *   java -cp ... skiff.conformance.Main --mqadmin-setup --namesrv ADDR --topic T --group G --producer-group P
 * </pre>
 *
 * Prints {@code SCENARIOS name...} first, then per scenario one line {@code PASS name (secs): observed}
 * or {@code FAIL name (secs): failures | observed}, then {@code N passed, M failed}. Exit 0 iff all
 * passed. --mqadmin-setup prepares the state tests/conformance/mqadmin.sh needs ({@link MqadminSetup}).
 * Every scenario uses topic and group names unique to this run. --core keeps only the
 * {@link #CORE} scenarios; --prefix P names each scenario P + name (in --only, the output and its
 * topic and group names).
 */
public final class Main {
    private Main() {}

    /**
     * --core: the scenarios run.sh also runs with the harness built against rocketmq-client 4.9.8
     * (pom-4.9.8.xml), there under --prefix v4_.
     */
    static final List<String> CORE = Arrays.asList("send_sync", "send_async", "send_oneway", "send_batch",
        "push_tag_filter", "retry_to_dlq", "from_first_offset", "restart_resumes", "rebalance_two_consumers",
        "orderly_consume_suspend", "broadcasting", "request_reply");

    public static void main(String[] args) throws Exception {
        String namesrv = null;
        List<String> only = null;
        int parallel = 4;
        boolean list = false;
        String phase = null;
        String state = null;
        String prefix = "";
        boolean core = false;
        boolean mqadminSetup = false;
        String topic = null;
        String group = null;
        String producerGroup = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--namesrv": namesrv = args[++i]; break;
                case "--only": only = Arrays.asList(args[++i].split(",")); break;
                case "--parallel": parallel = Integer.parseInt(args[++i]); break;
                case "--list": list = true; break;
                case "--phase": phase = args[++i]; break;
                case "--state": state = args[++i]; break;
                case "--prefix": prefix = args[++i]; break;
                case "--core": core = true; break;
                case "--mqadmin-setup": mqadminSetup = true; break;
                case "--topic": topic = args[++i]; break;
                case "--group": group = args[++i]; break;
                case "--producer-group": producerGroup = args[++i]; break;
                default:
                    System.err.println("unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        // Rebalance every 2 s instead of 20 s (read once when the client's RebalanceService loads).
        System.setProperty("rocketmq.client.rebalance.waitInterval", "2000");
        if (mqadminSetup) {
            System.exit(MqadminSetup.run(namesrv, topic, group, producerGroup));
        }
        if (phase != null) {
            System.exit(runPhase(namesrv, phase, java.nio.file.Paths.get(state)));
        }
        Map<String, Scenarios.Def> all = new LinkedHashMap<>();
        for (Map.Entry<String, Scenarios.Def> e : Scenarios.all().entrySet()) {
            if (!core || CORE.contains(e.getKey())) {
                all.put(prefix + e.getKey(), e.getValue());
            }
        }
        Map<String, Scenarios.Def> chosen = new LinkedHashMap<>();
        if (only == null) {
            chosen.putAll(all);
        } else {
            for (String n : only) {
                if (all.containsKey(n)) {
                    chosen.put(n, all.get(n));
                } else {
                    System.err.println("not a Java scenario, skipped: " + n + "; known: " + all.keySet());
                }
            }
        }
        System.out.println("SCENARIOS " + String.join(" ", chosen.keySet()));
        if (list || chosen.isEmpty()) {
            return;
        }
        if (namesrv == null) {
            System.err.println("--namesrv is required");
            System.exit(2);
        }
        final String ns = namesrv;
        final String runId = Ctx.newRunId();
        AtomicInteger passed = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        // Longest first, so the slow ones overlap with the rest.
        List<Map.Entry<String, Scenarios.Def>> order = new ArrayList<>(chosen.entrySet());
        order.sort((a, b) -> Integer.compare(b.getValue().timeoutSecs, a.getValue().timeoutSecs));
        ExecutorService outer = Executors.newFixedThreadPool(Math.max(1, parallel));
        List<Future<?>> done = new ArrayList<>();
        for (Map.Entry<String, Scenarios.Def> e : order) {
            done.add(outer.submit(() -> {
                boolean ok = runOne(e.getKey(), e.getValue(), ns, runId);
                (ok ? passed : failed).incrementAndGet();
            }));
        }
        for (Future<?> f : done) {
            f.get();
        }
        outer.shutdownNow();
        System.out.println(passed.get() + " passed, " + failed.get() + " failed");
        System.out.flush();
        // Client threads (netty, schedulers) of failed scenarios may linger: exit explicitly.
        System.exit(failed.get() == 0 ? 0 : 1);
    }

    /** An exception and its causes, one line (client exceptions carry the broker's code and remark). */
    static String chain(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (int depth = 0; t != null && depth < 4; depth++, t = t.getCause()) {
            if (depth > 0) {
                sb.append(" <- caused by ");
            }
            sb.append(String.valueOf(t).replaceAll("\\s*\\n\\s*", " ").replaceAll("See https?://\\S+ for further details\\.?", "")
                .replaceAll("For more information, please visit the url, https?://\\S+", "").trim());
        }
        return sb.toString();
    }

    /**
     * --phase 1|2 --state FILE: one half of broker_restart_resumes. Phase 1 prints
     * {@code PHASE1 OK} or a FAIL line; phase 2 prints the scenario's PASS/FAIL line.
     */
    private static int runPhase(String namesrv, String phase, java.nio.file.Path state) throws Exception {
        System.setProperty("rocketmq.client.rebalance.waitInterval", "2000");
        String runId = "1".equals(phase) ? Ctx.newRunId() : "p2" + Ctx.newRunId();
        Scenarios.Def def = new Scenarios.Def(90, "1".equals(phase)
            ? c -> BrokerRestart.phase1(c, state) : c -> BrokerRestart.phase2(c, state));
        if ("1".equals(phase)) {
            Ctx ctx = new Ctx(BrokerRestart.NAME, namesrv, runId);
            boolean ok = runQuiet(ctx, def);
            System.out.println(ok ? "PHASE1 OK" : "FAIL " + BrokerRestart.NAME + " (before the restart): "
                + String.join(" | ", ctx.failures()));
            System.out.flush();
            System.exit(ok ? 0 : 1);
        }
        boolean ok = runOne(BrokerRestart.NAME, def, namesrv, runId);
        System.exit(ok ? 0 : 1);
        return 0;
    }

    private static boolean runQuiet(Ctx ctx, Scenarios.Def def) {
        ExecutorService ex = Executors.newSingleThreadExecutor();
        try {
            ex.submit(() -> {
                def.body.run(ctx);
                return null;
            }).get(def.timeoutSecs, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            ctx.fail("exception: " + chain(e.getCause()));
        } catch (Exception e) {
            ctx.fail(String.valueOf(e));
        } finally {
            ex.shutdownNow();
            ctx.closeAll();
        }
        return ctx.failures().isEmpty();
    }

    private static boolean runOne(String name, Scenarios.Def def, String namesrv, String runId) {
        Ctx ctx = new Ctx(name, namesrv, runId);
        long t0 = System.currentTimeMillis();
        ExecutorService ex = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "scenario-" + name);
            t.setDaemon(true);
            return t;
        });
        try {
            Future<?> f = ex.submit(() -> {
                def.body.run(ctx);
                return null;
            });
            f.get(def.timeoutSecs, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            ctx.fail("scenario timed out after " + def.timeoutSecs + "s");
        } catch (java.util.concurrent.ExecutionException e) {
            ctx.fail("exception: " + chain(e.getCause()));
        } catch (InterruptedException e) {
            ctx.fail("interrupted");
        } finally {
            ex.shutdownNow();
            ctx.closeAll();
        }
        double secs = (System.currentTimeMillis() - t0) / 1000.0;
        List<String> failures = ctx.failures();
        String obs = String.join("; ", ctx.observed());
        String line;
        if (failures.isEmpty()) {
            line = String.format("PASS %s (%.1fs): %s", name, secs, obs);
        } else {
            line = String.format("FAIL %s (%.1fs): %s%s", name, secs, String.join(" | ", failures),
                obs.isEmpty() ? "" : " || observed: " + obs);
        }
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
        return failures.isEmpty();
    }
}
