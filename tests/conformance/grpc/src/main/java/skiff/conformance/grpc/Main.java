package skiff.conformance.grpc;

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
 * Runs the gRPC conformance scenarios against a RocketMQ 5 gRPC endpoint.
 *
 * <pre>
 *   java -cp ... skiff.conformance.grpc.Main --endpoint 127.0.0.1:8081 --namesrv 127.0.0.1:9876
 *       [--tls on|off|both] [--only a,b] [--kind all|lite|other] [--parallel N] [--list]
 *       [--wire-log FILE]
 * </pre>
 *
 * --endpoint is the gRPC port (MessagingService), --namesrv the remoting name server the
 * scenarios' topics and groups are created through (DefaultMQAdminExt). Every scenario runs once
 * per TLS mode, named {@code NAME.tls} (the client's enableSsl(true)) and {@code NAME.plain}
 * (enableSsl(false)); --only takes either the plain NAME (both modes) or a full name. Prints
 * {@code SCENARIOS name...} first, then per run one line {@code PASS name (secs): observed} or
 * {@code FAIL name (secs): failures || observed: ...}, then {@code N passed, M failed}; exit 0 iff
 * all passed. --wire-log FILE sends the plaintext runs through {@link WireRelay}, which logs
 * every call (method, metadata, messages as protobuf text, status) to FILE. --kind lite runs only
 * the lite-topic scenarios ({@code lite_*}), --kind other all the others (Apache serves lite
 * topics only with its proxy in cluster mode, the rest runs against its local mode).
 */
public final class Main {
    private Main() {}

    public static void main(String[] args) throws Exception {
        String endpoint = null;
        String namesrv = null;
        String tlsMode = "both";
        List<String> only = null;
        int parallel = 6;
        boolean list = false;
        String wireLog = null;
        String kind = "all";
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--endpoint": endpoint = args[++i]; break;
                case "--namesrv": namesrv = args[++i]; break;
                case "--tls": tlsMode = args[++i]; break;
                case "--only": only = Arrays.asList(args[++i].split(",")); break;
                case "--parallel": parallel = Integer.parseInt(args[++i]); break;
                case "--list": list = true; break;
                case "--wire-log": wireLog = args[++i]; break;
                case "--kind": kind = args[++i]; break;
                default:
                    System.err.println("unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        List<Boolean> modes = new ArrayList<>();
        switch (tlsMode) {
            case "on": modes.add(true); break;
            case "off": modes.add(false); break;
            case "both": modes.add(true); modes.add(false); break;
            default:
                System.err.println("--tls on|off|both");
                System.exit(2);
        }
        Map<String, Scenarios.Def> defs = Scenarios.all();
        final String wanted = kind;
        defs.keySet().removeIf(name -> wanted.equals("lite") != name.startsWith("lite_") && !wanted.equals("all"));
        if (list) {
            System.out.println("SCENARIOS " + String.join(" ", defs.keySet()));
            return;
        }
        // name -> (base, tls)
        Map<String, Object[]> chosen = new LinkedHashMap<>();
        for (boolean tls : modes) {
            for (String base : defs.keySet()) {
                String full = base + "." + (tls ? "tls" : "plain");
                if (only == null || only.contains(base) || only.contains(full)) {
                    chosen.put(full, new Object[] {base, tls});
                }
            }
        }
        if (only != null) {
            for (String n : only) {
                String base = n.replaceFirst("\\.(tls|plain)$", "");
                if (!defs.containsKey(base)) {
                    System.err.println("not a gRPC scenario, skipped: " + n + "; known: " + defs.keySet());
                }
            }
        }
        System.out.println("SCENARIOS " + String.join(" ", chosen.keySet()));
        System.out.flush();
        if (chosen.isEmpty()) {
            return;
        }
        if (endpoint == null || namesrv == null) {
            System.err.println("--endpoint and --namesrv are required");
            System.exit(2);
        }
        Admin admin = new Admin(namesrv);
        final String ep = endpoint;
        // --wire-log FILE: the plaintext runs go through a logging relay (WireRelay).
        String plainEp = endpoint;
        if (wireLog != null) {
            WireRelay relay = new WireRelay(endpoint,
                new java.io.PrintStream(new java.io.FileOutputStream(wireLog), true, "UTF-8"));
            plainEp = relay.endpoint();
        }
        final String plain = plainEp;
        final String runId = Ctx.newRunId();
        AtomicInteger passed = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        // Longest first, so the slow ones overlap with the rest.
        List<Map.Entry<String, Object[]>> order = new ArrayList<>(chosen.entrySet());
        order.sort((a, b) -> Integer.compare(defs.get((String) b.getValue()[0]).timeoutSecs,
            defs.get((String) a.getValue()[0]).timeoutSecs));
        ExecutorService outer = Executors.newFixedThreadPool(Math.max(1, parallel));
        List<Future<?>> done = new ArrayList<>();
        for (Map.Entry<String, Object[]> e : order) {
            String base = (String) e.getValue()[0];
            boolean tls = (Boolean) e.getValue()[1];
            done.add(outer.submit(() -> {
                boolean ok = runOne(new Ctx(base, tls, tls ? ep : plain, admin, runId), defs.get(base));
                (ok ? passed : failed).incrementAndGet();
            }));
        }
        for (Future<?> f : done) {
            f.get();
        }
        outer.shutdownNow();
        System.out.println(passed.get() + " passed, " + failed.get() + " failed");
        System.out.flush();
        // Client threads of failed scenarios may linger: exit explicitly.
        System.exit(failed.get() == 0 ? 0 : 1);
    }

    /** An exception and its causes, one line (client exceptions carry the server's code). */
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

    private static boolean runOne(Ctx ctx, Scenarios.Def def) {
        String name = ctx.scenario;
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
            long c0 = System.currentTimeMillis();
            ctx.closeAll();
            long closing = System.currentTimeMillis() - c0;
            if (closing > 2000) {
                ctx.note(String.format("closing the clients took %.1fs", closing / 1000.0));
            }
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
