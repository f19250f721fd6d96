package skiff.conformance.grpc;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientConfigurationBuilder;

/** What one scenario run sees: its endpoint and TLS mode, its unique names, and its checks. */
final class Ctx {
    final String scenario;
    final String base;
    final boolean tls;
    final String endpoint;
    final Admin admin;
    final String runId;
    private final List<String> failures = new ArrayList<>();
    private final List<String> observed = new ArrayList<>();
    private final List<AutoCloseable> closers = new ArrayList<>();
    private int names;

    Ctx(String base, boolean tls, String endpoint, Admin admin, String runId) {
        this.base = base;
        this.scenario = base + "." + (tls ? "tls" : "plain");
        this.tls = tls;
        this.endpoint = endpoint;
        this.admin = admin;
        this.runId = runId;
    }

    /**
     * A topic, group or namespace name unique to this run, scenario and TLS mode: letters, digits
     * and '_' only (what the proxy's validator and the broker accept), under 100 characters.
     */
    synchronized String name(String kind) {
        names++;
        String s = "g_" + base + "_" + kind + names + "_" + (tls ? "t" : "p") + runId;
        return s.length() > 100 ? s.substring(0, 100) : s;
    }

    static String newRunId() {
        return Long.toString(System.currentTimeMillis() % 100_000_000L, 36)
            + Integer.toString(ThreadLocalRandom.current().nextInt(1296), 36);
    }

    /** The client configuration of this scenario: endpoint, TLS on or off, optional namespace. */
    ClientConfiguration config(String namespace) {
        return config(endpoint, tls, namespace);
    }

    /** A client configuration for another endpoint (a relay in front of the server). */
    static ClientConfiguration config(String endpoint, boolean tls, String namespace) {
        ClientConfigurationBuilder b = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl(tls)
            .setRequestTimeout(Duration.ofSeconds(10));
        if (namespace != null) {
            b.setNamespace(namespace);
        }
        return b.build();
    }

    ClientConfiguration config() {
        return config(null);
    }

    synchronized void note(String what) {
        observed.add(what);
    }

    synchronized boolean check(boolean ok, String what) {
        if (!ok) {
            failures.add(what);
        }
        return ok;
    }

    /** Expected-vs-observed check; the message names both. */
    synchronized boolean eq(String what, Object expected, Object actual) {
        boolean ok = Objects.equals(expected, actual);
        if (!ok) {
            failures.add(what + ": expected " + expected + ", observed " + actual);
        }
        return ok;
    }

    synchronized void fail(String what) {
        failures.add(what);
    }

    synchronized <T extends AutoCloseable> T closeLater(T c) {
        closers.add(c);
        return c;
    }

    void closeAll() {
        List<AutoCloseable> cs;
        synchronized (this) {
            cs = new ArrayList<>(closers);
            closers.clear();
        }
        for (int i = cs.size() - 1; i >= 0; i--) {
            try {
                cs.get(i).close();
            } catch (Exception e) {
                // shutting down a client that already failed: nothing to report
            }
        }
    }

    synchronized List<String> failures() {
        return new ArrayList<>(failures);
    }

    synchronized List<String> observed() {
        return new ArrayList<>(observed);
    }
}
