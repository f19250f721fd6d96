package skiff.conformance;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;

/** What one scenario run sees: its unique names, and its checks (each one can fail). */
final class Ctx {
    final String scenario;
    final String namesrv;
    final String runId;
    private final List<String> failures = new ArrayList<>();
    private final List<String> observed = new ArrayList<>();
    private final List<AutoCloseable> closers = new ArrayList<>();
    private int names;

    Ctx(String scenario, String namesrv, String runId) {
        this.scenario = scenario;
        this.namesrv = namesrv;
        this.runId = runId;
    }

    /** A topic or group name unique to this run and scenario: allowed chars only, < 128. */
    synchronized String name(String kind) {
        names++;
        String s = "cf_" + scenario + "_" + kind + names + "_" + runId;
        return s.length() > 120 ? s.substring(0, 120) : s;
    }

    static String newRunId() {
        return Long.toString(System.currentTimeMillis() % 100_000_000L, 36)
            + Integer.toString(ThreadLocalRandom.current().nextInt(1296), 36);
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
            failures.add(what + ": expected " + Util.show(expected) + ", observed " + Util.show(actual));
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
