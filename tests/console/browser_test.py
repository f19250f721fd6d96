#!/usr/bin/env python3
"""Console test: skiff's web console (GET / on the metrics listener) and its JSON API, checked
against the broker's own answers (`skiff admin`), with data made by a real RocketMQ client.

  browser_test.py --namesrv 127.0.0.1:P --http http://127.0.0.1:H --skiff BIN --work DIR
                  [--screenshots DIR]

Run by tests/console/run.sh, which starts `skiff serve`. Steps:

* data: a PyPI ``rocketmq`` 0.4.4 producer (rocketmq-client-cpp) sends 30 JSON messages with
  keys ``order-N`` and tags tagA/tagB to ConsoleOrders (4 queues); a push consumer of group
  ConsoleGroup reads them from the first offset and shuts down (persisting its offsets); 10
  more are sent, so the group lags by 10. A ticker producer and consumer (ConsoleTicker,
  ConsoleTickerGroup) run throughout, so the rate charts and connection counts have data.
* api_*: every endpoint with urllib, compared with `skiff admin --json`, and bad input: unknown
  topic, group and message 404, malformed offsets 400, reset without confirm 400, POST and DELETE
  without X-Skiff-Console 403, duplicate topic 409.
* ui_*: headless Chromium (Selenium, /usr/bin/chromedriver, 1280x900) opens every page and
  compares what it shows with the API and `skiff admin`; creates and deletes a topic (confirm
  dialog), sends a test message and finds it by the id shown, watches the live tail receive a
  message the Python producer sends after it opened, and resets the group's offsets (the
  dialog dismissed first, then accepted) and reads them back with `skiff admin progress`.
* every page is checked at 1024 and 1440 px wide (nothing wider than its card, no clipped cell,
  no stray null/undefined); with --screenshots, each is saved whole as console-PAGE-WIDTH.png.
* page_checks.py holds the checks of the later items (find by the producer's id, refreshes,
  zones, group settings, members, producers, cluster, time search, and last the users page,
  whose first user turns ACL on until its last one is deleted: the browser then signs in with a
  header set over the DevTools protocol); the browser runs in TZ=Asia/Kolkata so a time without
  its zone is caught.

Output: one ``PASS name: note`` or ``FAIL name: why`` line per check, then ``N passed, M failed``.
Exit status 0 iff nothing failed.
"""

import argparse
import base64
import ctypes
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

TOPIC = "ConsoleOrders"
GROUP = "ConsoleGroup"
TICKER_TOPIC = "ConsoleTicker"
TICKER_GROUP = "ConsoleTickerGroup"
FIRST_BATCH = 30
SECOND_BATCH = 10
QUEUES = 4
# A well-formed offset message id (store address 127.0.0.1:10911, commit-log offset 2^40 - 1)
# that no message has.
ABSENT_ID = "7F00000100002A9F000000FFFFFFFFFF"
CONSUME_FROM_FIRST_OFFSET = 4  # rocketmq-client-cpp include/ConsumeType.h
SET_CONSUME_FROM_WHERE = "_ZN8rocketmq21DefaultMQPushConsumer19setConsumeFromWhereENS_16ConsumeFromWhereE"

RESULTS = []
# Ids later checks reuse: the traced message, the dead letter.
SEEN = {}


def log(msg):
    print("[console %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def record(name, ok, note):
    line = "%s %s: %s" % ("PASS" if ok else "FAIL", name, note)
    RESULTS.append((name, ok))
    print(line, flush=True)


class Check(Exception):
    pass


def expect(cond, why):
    if not cond:
        raise Check(why)


def check(name, fn, *args):
    """Runs one check; a Check or any other exception fails it and the run goes on."""
    started = time.monotonic()
    try:
        note = fn(*args) or "ok"
        record(name, True, "%s (%.1fs)" % (note, time.monotonic() - started))
    except Check as e:
        record(name, False, str(e))
    except Exception as e:  # a crash in one check must not hide the others' results
        record(name, False, "%s: %s" % (type(e).__name__, e))
        traceback.print_exc(file=sys.stderr)


def wait_for(pred, timeout, what, interval=0.25):
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = pred()
            if last:
                return last
        except Exception as e:  # the page may be between renders
            last = e
        if time.monotonic() >= deadline:
            raise Check("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))
        time.sleep(interval)


# ---- the HTTP API --------------------------------------------------------------------------------

class Http:
    def __init__(self, base):
        self.base = base.rstrip("/")

    def call(self, method, path, body=None, header=True, raw=None, timeout=15):
        """(status, content type, parsed JSON or text). header: send X-Skiff-Console: 1."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if header and method != "GET":
            req.add_header("X-Skiff-Console", "1")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, ctype, text = r.status, r.headers.get("Content-Type", ""), r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            status, ctype, text = e.code, e.headers.get("Content-Type", ""), e.read().decode("utf-8", "replace")
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return status, ctype, parsed

    def get(self, path, status=200):
        st, _, body = self.call("GET", path)
        expect(st == status, "GET %s: status %s, expected %s: %s" % (path, st, status, short(body)))
        return body


def short(v, n=300):
    s = v if isinstance(v, str) else json.dumps(v)
    return s if len(s) <= n else s[:n] + "..."


def q(name):
    return urllib.parse.quote(name, safe="")


def error_body(body):
    return isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"] != ""


# ---- skiff admin, the broker's own answers ----------------------------------------------------------

class Admin:
    def __init__(self, binary, namesrv):
        self.binary, self.namesrv = binary, namesrv

    def run(self, *args, json_out=True):
        cmd = [self.binary, "admin", "--namesrv", self.namesrv] + (["--json"] if json_out else []) + list(args)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise Check("%s: exit %d: %s" % (" ".join(cmd[1:]), p.returncode, (p.stderr or p.stdout).strip()[-300:]))
        return p.stdout

    def json(self, *args):
        out = self.run(*args)
        try:
            return json.loads(out)
        except ValueError:
            return None

    def topics(self):
        """{name: {read_queues, write_queues, perm, message_type}} from `skiff admin topics`."""
        out = self.run("topics")
        try:
            data = json.loads(out)
        except ValueError:
            data = None
        result = {}
        if data is not None:
            items = data.get("topics", data) if isinstance(data, dict) else data
            for t in items:
                name = t.get("topic") or t.get("name")
                result[name] = {"read_queues": t.get("read_queues"), "write_queues": t.get("write_queues"),
                                "perm": t.get("perm"), "message_type": t.get("message_type")}
            return result
        # The table: TOPIC BROKER READ-QUEUES WRITE-QUEUES PERM MESSAGE-TYPE, no spaces in a cell.
        for line in out.splitlines()[1:]:
            cells = line.split()
            if len(cells) < 6:
                continue
            num = lambda c: int(c) if c.isdigit() else None
            result[cells[0]] = {"read_queues": num(cells[2]), "write_queues": num(cells[3]), "perm": cells[4],
                                "message_type": None if cells[5] == "-" else cells[5]}
        return result

    def progress(self, group):
        """{(topic, queue_id): {broker_offset, consumer_offset, lag}} from `skiff admin progress`."""
        out = self.run("progress", group)
        try:
            data = json.loads(out)
        except ValueError:
            data = None
        result = {}
        if data is not None:
            items = data.get("queues", data) if isinstance(data, dict) else data
            for r in items:
                result[(r["topic"], int(r["queue_id"]))] = {
                    "broker_offset": int(r["broker_offset"]), "consumer_offset": int(r["consumer_offset"]),
                    "lag": int(r.get("lag", max(0, int(r["broker_offset"]) - int(r["consumer_offset"]))))}
            return result
        # The table: TOPIC BROKER QID BROKER-OFFSET CONSUMER-OFFSET LAG IN-FLIGHT LAST-TIME.
        for line in out.splitlines():
            cells = line.split()
            if len(cells) >= 7 and cells[2].isdigit() and cells[3].lstrip("-").isdigit():
                result[(cells[0], int(cells[2]))] = {"broker_offset": int(cells[3]),
                                                     "consumer_offset": int(cells[4]), "lag": int(cells[5])}
        return result

    def topic_status(self, topic):
        """{queue_id: (min, max)} from `skiff admin --json topic-status`."""
        return {int(r["queue_id"]): (int(r["min_offset"]), int(r["max_offset"])) for r in self.json("topic-status", topic)}

    def message(self, msg_id, topic):
        """The stored message with this id (a unique key, looked up in topic, or an offset id)."""
        for args in (("message", msg_id, "--topic", topic), ("message", msg_id)):
            try:
                found = self.json(*args)
            except Check:
                continue
            if found:
                return found[0]
        raise Check("skiff admin message %s (--topic %s): not found" % (msg_id, topic))


# ---- the RocketMQ client (rocketmq-client-cpp through PyPI rocketmq 0.4.4) --------------------------

class Client:
    def __init__(self, namesrv, log_dir):
        from rocketmq import client, ffi
        self.rmq, self.ffi = client, ffi
        self.namesrv, self.log_dir = namesrv, log_dir
        self.n = 0

    def _logs(self, set_path, set_level, handle, name):
        path = os.path.join(self.log_dir, name)
        os.makedirs(path, exist_ok=True)
        set_path.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        set_level.argtypes = [ctypes.c_void_p, ctypes.c_int]
        set_path(handle, path.encode())
        set_level(handle, 3)  # WARN

    def producer(self, group):
        # Each producer and consumer of this process gets its own instance name: the C++ client
        # shares one client instance per name, and with it one group's settings.
        self.n += 1
        p = self.rmq.Producer(group)
        p.set_namesrv_addr(self.namesrv)
        dll = self.ffi.dll
        dll.SetProducerInstanceName.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        dll.SetProducerInstanceName(p._handle, ("console%d-%d" % (os.getpid(), self.n)).encode())
        self._logs(dll.SetProducerLogPath, dll.SetProducerLogLevel, p._handle, group)
        p.start()
        return p

    def consumer(self, group, topic, on_message):
        self.n += 1
        c = self.rmq.PushConsumer(group, message_model=self.ffi.MessageModel.CLUSTERING)
        c.set_namesrv_addr(self.namesrv)
        c.set_instance_name("console%d-%d" % (os.getpid(), self.n))
        dll = self.ffi.dll
        self._logs(dll.SetPushConsumerLogPath, dll.SetPushConsumerLogLevel, c._handle, group)
        # The C API has no setter for consumeFromWhere; the handle is the C++ consumer (see
        # tests/interop/python/interop_client.py).
        set_cfw = getattr(dll, SET_CONSUME_FROM_WHERE)
        set_cfw.argtypes = [ctypes.c_void_p, ctypes.c_int]
        set_cfw.restype = None
        set_cfw(c._handle, CONSUME_FROM_FIRST_OFFSET)
        c.subscribe(topic, on_message, "*")
        c.start()
        return c

    def message(self, topic, body, tags=None, keys=None, props=None):
        m = self.rmq.Message(topic)
        m.set_body(body)
        if tags:
            m.set_tags(tags)
        if keys:
            m.set_keys(keys)
        for k, v in (props or {}).items():
            m.set_property(k, v)
        return m

    def send(self, producer, msg):
        r = producer.send_sync(msg)
        if r.status != self.rmq.SendStatus.OK:
            raise Check("send: status %s" % r.status)
        return r


def order_body(i):
    return json.dumps({"order": i, "customer": "c-%d" % (i % 7), "items": [{"sku": "sku-%d" % (i % 5), "qty": 1 + i % 3}],
                       "note": "made by tests/console"})


class Ticker:
    """A producer and a consumer on ConsoleTicker for the whole run: the overview's rate charts
    and connection counts need live traffic."""

    def __init__(self, client, admin):
        self.client = client
        self.stop = threading.Event()
        self.consumed = 0
        # The topic exists before its consumer starts, as on a RocketMQ cluster: a consumer of a
        # missing topic finds no broker, so it would not join its group until its next route
        # refresh (30 s in this client).
        admin.run("topic", "create", TICKER_TOPIC, "--queues", "4", json_out=False)
        self.producer = client.producer("ConsoleTickerProducer")
        self.consumer = client.consumer(TICKER_GROUP, TICKER_TOPIC, self._on)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on(self, msg):
        self.consumed += 1


    def _run(self):
        i = 0
        while not self.stop.is_set():
            # Bursts of varying size, so the rate chart is not a flat line.
            for _ in range(1 + (i // 10) % 5):
                try:
                    self.client.send(self.producer, self.client.message(TICKER_TOPIC, "tick-%d" % i, tags="tick"))
                except Exception as e:
                    log("ticker send failed: %s" % e)
                i += 1
            self.stop.wait(0.5)

    def close(self):
        self.stop.set()
        self.thread.join(10)
        self.producer.shutdown()
        self.consumer.shutdown()


def make_data(client, admin):
    """ConsoleOrders with 40 messages, of which ConsoleGroup consumed (and committed) the first 30."""
    admin.run("topic", "create", TOPIC, "--queues", str(QUEUES), json_out=False)
    admin.run("topic", "create", TICKER_TOPIC, "--queues", "2", json_out=False)
    producer = client.producer("ConsoleProducer")
    try:
        for i in range(FIRST_BATCH):
            client.send(producer, client.message(TOPIC, order_body(i), tags="tagA" if i % 2 == 0 else "tagB",
                                                 keys="order-%d" % i, props={"source": "console-test"}))
        seen = set()
        cond = threading.Condition()

        def on_message(msg):
            with cond:
                seen.add(msg.body.decode())
                cond.notify_all()


        consumer = client.consumer(GROUP, TOPIC, on_message)
        deadline = time.monotonic() + 90
        with cond:
            while len(seen) < FIRST_BATCH and time.monotonic() < deadline:
                cond.wait(1)
        got = len(seen)
        time.sleep(6)  # one offset-persist period (5 s) of the C++ client before its shutdown
        consumer.shutdown()
        if got < FIRST_BATCH:
            raise Check("ConsoleGroup consumed %d of %d messages in 90 s" % (got, FIRST_BATCH))
        for i in range(FIRST_BATCH, FIRST_BATCH + SECOND_BATCH):
            client.send(producer, client.message(TOPIC, order_body(i), tags="tagA" if i % 2 == 0 else "tagB",
                                                 keys="order-%d" % i, props={"source": "console-test"}))
    finally:
        producer.shutdown()


def page_files(api):
    """The three embedded files, with their content types; /metrics is still served."""
    notes = []
    for path, kind, marker in (("/", "text/html", "/console/app.js"), ("/console/app.js", "javascript", "X-Skiff-Console"),
                               ("/console/style.css", "text/css", "--accent"), ("/metrics", "text/plain", "")):
        req = urllib.request.Request(api.base + path)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                ctype, text = r.headers.get("Content-Type", ""), r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            raise Check("GET %s: %s" % (path, e.code))
        expect(kind in ctype, "GET %s: content type %r, expected %s" % (path, ctype, kind))
        expect(marker in text, "GET %s: not the console's file (no %r)" % (path, marker))
        notes.append("%s %s" % (path, ctype))
    return ", ".join(notes)


# ---- API checks --------------------------------------------------------------------------------------

def api_overview(api, admin):
    o = api.get("/api/v1/overview")
    for k in ("version", "broker_name", "cluster_name", "uptime_ms", "listen", "disk", "connections", "topics", "groups", "rates"):
        expect(k in o, "overview has no %r: %s" % (k, short(o)))
    for k in ("data_dir", "used_bytes", "total_bytes", "used_ratio", "max_used_ratio", "full_ratio", "retention_ms"):
        expect(k in o["disk"], "overview.disk has no %r" % k)
    for k in ("total", "by_protocol", "by_language"):
        expect(k in o["connections"], "overview.connections has no %r" % k)
    expect(o["listen"] == admin.namesrv, "listen %r, skiff listens on %s" % (o["listen"], admin.namesrv))
    topics = api.get("/api/v1/topics")["topics"]
    all_n, user_n = len(topics), len([t for t in topics if not t["system"]])
    expect(o["topics"] in (all_n, user_n), "overview topics %s, /topics lists %d (%d not system)" % (o["topics"], all_n, user_n))
    groups = api.get("/api/v1/groups")["groups"]
    expect(o["groups"] == len(groups), "overview groups %s, /groups lists %d" % (o["groups"], len(groups)))
    at = [r["at_ms"] for r in o["rates"]]
    expect(at == sorted(at), "rates not oldest first")
    expect(all(now_ms() - 3700e3 <= t <= now_ms() + 60e3 for t in at), "rates outside the last hour")
    return "version %s, %d topics, %d groups, %d rate samples" % (o["version"], o["topics"], o["groups"], len(at))


def api_overview_disk(api, admin):
    d = api.get("/api/v1/overview")["disk"]
    expect(0 <= d["used_ratio"] <= 1 and d["used_bytes"] <= d["total_bytes"], "disk numbers out of range: %s" % short(d))
    expect(d["max_used_ratio"] < d["full_ratio"] <= 1, "ratios %s" % short(d))
    # The page shows both the bytes and the ratio: they must tell the same story.
    expect(abs(d["used_bytes"] / max(1, d["total_bytes"]) - d["used_ratio"]) < 0.02,
           "used_bytes/total_bytes = %.3f but used_ratio = %.3f: %s"
           % (d["used_bytes"] / max(1, d["total_bytes"]), d["used_ratio"], short(d)))
    return "%.1f%% used of %d bytes" % (d["used_ratio"] * 100, d["total_bytes"])


def api_overview_connections(api, admin):
    c = api.get("/api/v1/overview")["connections"]
    expect(c["by_language"].get("CPP", 0) >= 1, "no CPP client counted while the ticker's producer and consumer run: %s" % short(c))
    expect(c["total"] >= 1 and sum(c["by_protocol"].values()) == sum(c["by_language"].values()),
           "connections by protocol %s and by language %s count different clients" % (c["by_protocol"], c["by_language"]))
    return "%d connections, %s, %s" % (c["total"], c["by_protocol"], c["by_language"])


def now_ms():
    return time.time() * 1000


def api_topics(api, admin):
    listed = {t["name"]: t for t in api.get("/api/v1/topics")["topics"]}
    theirs = admin.topics()
    expect(set(listed) == set(theirs), "API topics differ from skiff admin topics: only API %s, only admin %s"
           % (sorted(set(listed) - set(theirs)), sorted(set(theirs) - set(listed))))
    for name, a in theirs.items():
        t = listed[name]
        for k in ("read_queues", "write_queues"):
            expect(a[k] is None or t[k] == a[k], "%s %s: API %s, admin %s" % (name, k, t[k], a[k]))
        expect(a["perm"] is None or t["perm"].replace("-", "") == a["perm"].replace("-", ""),
               "%s perm: API %s, admin %s" % (name, t["perm"], a["perm"]))
        expect((t["message_type"] or None) == (a["message_type"] or None) or a["message_type"] in (None, "-"),
               "%s message type: API %s, admin %s" % (name, t["message_type"], a["message_type"]))
    status = admin.topic_status(TOPIC)
    t = listed[TOPIC]
    want = sum(mx - mn for mn, mx in status.values())
    expect(t["messages"] == want == FIRST_BATCH + SECOND_BATCH, "%s messages: API %s, admin %s" % (TOPIC, t["messages"], want))
    expect(not t["system"], "%s flagged system" % TOPIC)
    expect(any(t["system"] for t in listed.values()), "no topic flagged system (TBW102, %RETRY%...)")
    return "%d topics, same as skiff admin; %s has %d messages" % (len(listed), TOPIC, want)


def api_topic_detail(api, admin):
    t = api.get("/api/v1/topics/" + q(TOPIC))
    status = admin.topic_status(TOPIC)
    mine = {r["queue_id"]: (r["min_offset"], r["max_offset"]) for r in t["queues"]}
    expect(mine == status, "queue offsets: API %s, skiff admin topic-status %s" % (mine, status))
    groups = {g["group"]: g["lag"] for g in t["groups"]}
    expect(GROUP in groups, "%s not among the topic's groups %s" % (GROUP, groups))
    want = sum(r["lag"] for (topic, _), r in admin.progress(GROUP).items() if topic == TOPIC)
    expect(groups[GROUP] == want, "%s lag on the topic page %s, admin progress %s" % (GROUP, groups[GROUP], want))
    return "offsets %s; %s lag %d" % (mine, GROUP, want)


def api_not_found(api, admin):
    notes = []
    for path in ("/api/v1/topics/NoSuchTopic", "/api/v1/groups/NoSuchGroup", "/api/v1/messages/" + ABSENT_ID):
        st, _, body = api.call("GET", path)
        expect(st == 404 and error_body(body), "GET %s: %s %s, expected 404 with an error" % (path, st, short(body)))
        notes.append("%s %s" % (path.rsplit("/", 1)[1], body["error"]))
    return "; ".join(notes)


def api_groups(api, admin):
    groups = {g["name"]: g for g in api.get("/api/v1/groups")["groups"]}
    expect(GROUP in groups, "%s not listed: %s" % (GROUP, sorted(groups)))
    g = groups[GROUP]
    prog = admin.progress(GROUP)
    want = sum(r["lag"] for r in prog.values())
    expect(g["lag"] == want == SECOND_BATCH, "%s lag: API %s, skiff admin progress %s, expected %d" % (GROUP, g["lag"], want, SECOND_BATCH))
    expect(g["members"] == 0, "%s members %s, its consumer has shut down" % (GROUP, g["members"]))
    expect(groups.get(TICKER_GROUP, {}).get("members") == 1, "%s: %s, expected 1 member" % (TICKER_GROUP, groups.get(TICKER_GROUP)))
    expect(isinstance(g["consume_orderly"], bool) and g["retry_max_times"] == 16, "orderly/retry: %s" % short(g))
    return "%s lag %d, as skiff admin progress" % (GROUP, want)


def api_group_detail(api, admin):
    g = api.get("/api/v1/groups/" + q(GROUP))
    prog = admin.progress(GROUP)
    mine = {(r["topic"], r["queue_id"]): {"broker_offset": r["broker_offset"], "consumer_offset": r["consumer_offset"], "lag": r["lag"]}
            for r in g["queues"]}
    expect(mine == prog, "per-queue offsets: API %s, skiff admin progress %s" % (mine, prog))
    expect(g["lag"] == sum(r["lag"] for r in prog.values()), "group lag %s" % g["lag"])
    expect(g["retry_topic"] == "%RETRY%" + GROUP and g["dlq_topic"] == "%DLQ%" + GROUP, "retry/dlq: %s %s" % (g["retry_topic"], g["dlq_topic"]))
    at = [p["at_ms"] for p in g["lag_history"]]
    expect(at == sorted(at), "lag_history not oldest first")
    t = api.get("/api/v1/groups/" + q(TICKER_GROUP))
    expect(len(t["members"]) == 1 and any(s["topic"] == TICKER_TOPIC for s in t["subscriptions"]),
           "%s: members %s, subscriptions %s" % (TICKER_GROUP, t["members"], t["subscriptions"]))
    return "%d queues as skiff admin progress; %d lag samples" % (len(mine), len(at))


def api_messages(api, admin):
    status = admin.topic_status(TOPIC)
    total = 0
    for qid, (mn, mx) in status.items():
        page = api.get("/api/v1/messages?topic=%s&queue=%d&from=%d&count=%d" % (q(TOPIC), qid, mn, 100))
        offs = [m["queue_offset"] for m in page["messages"]]
        expect(offs == list(range(mn, mx)), "queue %d: offsets %s, expected %d..%d" % (qid, offs, mn, mx - 1))
        expect(page["next"] == mx, "queue %d: next %s, expected %d" % (qid, page["next"], mx))
        for m in page["messages"]:
            expect(m["topic"] == TOPIC and m["queue_id"] == qid and m["msg_id"], "summary %s" % short(m))
        total += len(offs)
    expect(total == FIRST_BATCH + SECOND_BATCH, "%d messages over all queues" % total)
    page = api.get("/api/v1/messages?topic=%s&queue=0&from=0&count=2" % q(TOPIC))
    expect(len(page["messages"]) == min(2, status[0][1]) and page["next"] == 2, "count=2: %s" % short(page))
    return "%d messages in %d queues, offsets and next as topic-status" % (total, len(status))


def api_message_by_key(api, admin):
    page = api.get("/api/v1/messages?topic=%s&key=%s" % (q(TOPIC), "order-7"))
    ms = page["messages"]
    expect(len(ms) == 1 and "order-7" in ms[0]["keys"].split(), "by key order-7: %s" % short(ms))
    m = api.get("/api/v1/messages/" + q(ms[0]["msg_id"]))
    body = m["body_text"]
    expect(json.loads(body)["order"] == 7, "body of order-7: %r" % body)
    expect(base64.b64decode(m["body_base64"]).decode() == body, "body_base64 does not decode to body_text")
    expect(m["properties"].get("source") == "console-test", "properties %s" % m["properties"])
    theirs = admin.message(m["msg_id"], TOPIC)
    expect(theirs["body"] == body, "skiff admin message %s: body %r, API %r" % (m["msg_id"], theirs["body"], body))
    expect((theirs["queue_id"], theirs["queue_offset"]) == (m["queue_id"], m["queue_offset"]),
           "position: admin %s/%s, API %s/%s" % (theirs["queue_id"], theirs["queue_offset"], m["queue_id"], m["queue_offset"]))
    cb = {c["group"]: c["consumed"] for c in m.get("consumed_by") or []}
    expect(cb.get(GROUP) is True, "consumed_by %s: %s should have consumed order-7 (one of the first 30)" % (cb, GROUP))
    return "order-7 is %s at %d/%d, body as skiff admin message" % (m["msg_id"], m["queue_id"], m["queue_offset"])


def api_bad_input(api, admin):
    cases = [
        ("GET", "/api/v1/messages?topic=%s&queue=abc&from=0&count=20" % TOPIC, None, 400),
        ("GET", "/api/v1/messages?topic=%s&queue=0&from=abc&count=20" % TOPIC, None, 400),
        ("GET", "/api/v1/messages?topic=%s&queue=0&from=-1&count=20" % TOPIC, None, 400),
        ("GET", "/api/v1/messages?topic=%s&queue=0&from=0&count=x" % TOPIC, None, 400),
        ("GET", "/api/v1/messages?topic=NoSuchTopic&queue=0&from=0&count=20", None, 404),
        ("POST", "/api/v1/groups/%s/reset-offset" % GROUP, {"topic": TOPIC, "to": "earliest"}, 400),
        ("POST", "/api/v1/groups/%s/reset-offset" % GROUP, {"topic": TOPIC, "to": "earliest", "confirm": False}, 400),
        ("POST", "/api/v1/groups/%s/reset-offset" % GROUP, {"topic": TOPIC, "to": "yesterday", "confirm": True}, 400),
        ("POST", "/api/v1/topics", {"name": "", "queues": 4, "message_type": None}, 400),
        ("POST", "/api/v1/topics", {"name": "ConsoleBadType", "queues": 4, "message_type": "SOMETIMES"}, 400),
        ("POST", "/api/v1/topics", {"name": "ConsoleBadQueues", "queues": 0, "message_type": None}, 400),
    ]
    notes = []
    for method, path, body, want in cases:
        st, _, got = api.call(method, path, body)
        expect(st == want and error_body(got), "%s %s %s: %s %s, expected %d with an error"
               % (method, path, short(body) if body else "", st, short(got), want))
        notes.append("%d" % st)
    st, _, got = api.call("POST", "/api/v1/topics", raw=b"{not json")
    expect(st == 400 and error_body(got), "POST /api/v1/topics with malformed JSON: %s %s" % (st, short(got)))
    prog = admin.progress(GROUP)
    expect(sum(r["lag"] for r in prog.values()) == SECOND_BATCH, "a refused reset changed the offsets: %s" % prog)
    topics = admin.topics()
    expect("ConsoleBadType" not in topics and "ConsoleBadQueues" not in topics, "a refused create made a topic")
    return "%d bad requests refused with an error body; offsets unchanged" % (len(cases) + 1)


def api_csrf_guard(api, admin):
    name = "ConsoleNoHeader"
    st, _, body = api.call("POST", "/api/v1/topics", {"name": name, "queues": 2, "message_type": None}, header=False)
    expect(st == 403 and error_body(body), "POST /api/v1/topics without X-Skiff-Console: %s %s" % (st, short(body)))
    expect(name not in admin.topics(), "the refused POST created %s" % name)
    st, _, body = api.call("DELETE", "/api/v1/topics/" + TOPIC, header=False)
    expect(st == 403, "DELETE without the header: %s %s" % (st, short(body)))
    st, _, body = api.call("POST", "/api/v1/groups/%s/reset-offset" % GROUP, {"topic": TOPIC, "to": "earliest", "confirm": True}, header=False)
    expect(st == 403, "reset-offset without the header: %s %s" % (st, short(body)))
    st, _, body = api.call("POST", "/api/v1/topics/%s/messages" % TOPIC, {"body": "x"}, header=False)
    expect(st == 403, "send without the header: %s %s" % (st, short(body)))
    expect(TOPIC in admin.topics() and sum(r["lag"] for r in admin.progress(GROUP).values()) == SECOND_BATCH,
           "a refused request changed state")
    return "POST/DELETE without the header refused with 403, nothing changed"


def api_topic_lifecycle(api, admin):
    name = "ConsoleApiTopic"
    st, _, body = api.call("POST", "/api/v1/topics", {"name": name, "queues": 3, "message_type": "FIFO"})
    expect(st == 201 and body == {"name": name}, "create: %s %s" % (st, short(body)))
    theirs = wait_for(lambda: admin.topics().get(name), 10, "%s in skiff admin topics" % name)
    expect(theirs["read_queues"] == 3 and theirs["write_queues"] == 3, "admin sees %s" % theirs)
    expect(theirs["message_type"] in (None, "FIFO"), "admin message type %s" % theirs["message_type"])
    st, _, body = api.call("POST", "/api/v1/topics", {"name": name, "queues": 3, "message_type": None})
    expect(st == 409 and error_body(body), "create again: %s %s, expected 409" % (st, short(body)))
    t = api.get("/api/v1/topics/" + name)
    expect(t["message_type"] == "FIFO" and len(t["queues"]) == 3, "detail %s" % short(t))
    st, _, body = api.call("DELETE", "/api/v1/topics/" + name)
    expect(st == 204, "delete: %s %s" % (st, short(body)))
    wait_for(lambda: name not in admin.topics(), 10, "%s gone from skiff admin topics" % name)
    st, _, body = api.call("GET", "/api/v1/topics/" + name)
    expect(st == 404, "GET after delete: %s" % st)
    return "201, in skiff admin topics (3 queues, FIFO), 409 again, 204, gone"


def api_send(api, admin):
    body = '{"api": "send", "at": %d}' % now_ms()
    st, _, r = api.call("POST", "/api/v1/topics/%s/messages" % TOPIC,
                        {"body": body, "tag": "apiTag", "keys": "api-k1 api-k2", "properties": {"via": "api"}, "delay_level": 0})
    expect(st == 200 and r.get("msg_id"), "send: %s %s" % (st, short(r)))
    m = api.get("/api/v1/messages/" + q(r["msg_id"]))
    expect(m["body_text"] == body and m["tags"] == "apiTag" and set(m["keys"].split()) == {"api-k1", "api-k2"},
           "stored: %s" % short(m))
    expect((m["queue_id"], m["queue_offset"]) == (r["queue_id"], r["queue_offset"]), "position %s vs %s" % (short(m), short(r)))
    expect(m["properties"].get("via") == "api", "properties %s" % m["properties"])
    theirs = admin.message(r["msg_id"], TOPIC)
    expect(theirs["body"] == body, "skiff admin message: body %r" % theirs["body"])
    byk = api.get("/api/v1/messages?topic=%s&key=api-k2" % TOPIC)["messages"]
    expect([x["msg_id"] for x in byk] == [r["msg_id"]], "by key api-k2: %s" % short(byk))
    return "%s at %d/%d, found by id, key and skiff admin" % (r["msg_id"], r["queue_id"], r["queue_offset"])


def api_tail(api, client, producer):
    """The event stream sends a message produced after it opened, and nothing from before."""
    url = urllib.parse.urlsplit(api.base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("GET", "/api/v1/topics/%s/tail" % TOPIC, headers={"Accept": "text/event-stream"})
    resp = conn.getresponse()
    try:
        expect(resp.status == 200, "status %s" % resp.status)
        ctype = resp.headers.get("Content-Type", "")
        expect(ctype.startswith("text/event-stream"), "content type %r" % ctype)
        events = []

        def read():
            # read1: what has arrived, not a full buffer (readline would wait for more).
            pending, event, data = "", None, []
            try:
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        return
                    pending += chunk.decode("utf-8")
                    *lines, pending = pending.split("\n")
                    for line in lines:
                        line = line.rstrip("\r")
                        if line.startswith("event:"):
                            event = line[6:].strip()
                        elif line.startswith("data:"):
                            data.append(line[5:].lstrip())
                        elif line == "":
                            if data:
                                events.append((event or "message", "\n".join(data)))
                            event, data = None, []
            except (OSError, ValueError, AttributeError):
                return  # the socket was shut down below

        t = threading.Thread(target=read, daemon=True)
        t.start()
        time.sleep(1.0)
        body = "api-tail-%d" % now_ms()
        sent_at = time.monotonic()
        r = client.send(producer, client.message(TOPIC, body, tags="tail", keys="api-tail"))
        got = wait_for(lambda: [json.loads(d) for e, d in events if e == "message"], 10, "an event on the tail stream", interval=0.05)
        latency = time.monotonic() - sent_at
        time.sleep(1.0)  # room for a duplicate or an old message to show up
        got = [json.loads(d) for e, d in events if e == "message"]
        # The producer's id is the client-made unique key; the API's msg_id is the offset id.
        ids = [(g["msg_id"], g.get("uniq_key")) for g in got]
        expect(any(r.msg_id in i for i in ids), "tail sent %s, producer's id %s" % (ids, r.msg_id))
        expect(len(got) == 1, "tail sent %d events for one message (does it start at the end?): %s" % (len(got), ids))
        g = got[0]
        expect(g["topic"] == TOPIC and g["keys"] == "api-tail" and g["tags"] == "tail", "summary %s" % short(g))
        return "event for %s %.2fs after the send (%s)" % (g["msg_id"], latency, ctype)
    finally:
        # Shutting the socket down wakes the reader; closing the response would wait for it.
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass
        conn.close()


# ---- browser ---------------------------------------------------------------------------------------------

class Browser:
    def __init__(self, base, work, shots):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
        self.By = By
        opts = webdriver.ChromeOptions()
        opts.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                  "--window-size=1280,900", "--user-data-dir=" + os.path.join(work, "chromium-profile"),
                  "--no-first-run", "--disable-extensions", "--lang=en-US"):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        # A zone other than UTC, so a time shown without its zone or in the wrong one is caught.
        import page_checks
        service = Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"),
                          log_output=os.path.join(work, "chromedriver.log"),
                          env=dict(os.environ, TZ=page_checks.BROWSER_TZ))
        self.d = webdriver.Chrome(service=service, options=opts)
        # The window size includes the browser's frame; the page itself gets exactly 1280x900.
        self.size(1280, 900)
        self.d.set_script_timeout(20)
        self.base = base.rstrip("/")
        self.shots = shots
        self.loads = 0

    def size(self, width, height):
        self.width = width
        self.d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def full_screenshot(self, name, width):
        """The whole page at this width (as tall as its content, up to 4000 px) into the
        screenshots dir."""
        os.makedirs(self.shots, exist_ok=True)
        path = os.path.join(self.shots, name)
        self.js("window.scrollTo(0, 0)")
        height = min(4000, max(900, int(self.js("return document.documentElement.scrollHeight"))))
        self.size(width, height)
        time.sleep(0.3)
        self.d.save_screenshot(path)
        self.size(width, 900)
        return name

    def open(self, hash_route, ready=True):
        """Loads the page afresh at a route and waits until the view has rendered (or failed)."""
        # A new query string each time: a change of the hash alone would not reload the page.
        self.loads += 1
        self.d.get("%s/?load=%d%s" % (self.base, self.loads, hash_route))
        if ready:
            wait_for(lambda: self.js("return document.getElementById('view').dataset.state") in ("ready", "error"),
                     20, "the view at %s to render" % hash_route)
        state = self.js("return document.getElementById('view').dataset.state")
        err = self.error()
        if ready and (state == "error" or err):
            raise Check("%s shows an error: %s" % (hash_route, err))

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def el(self, css):
        return self.d.find_element(self.By.CSS_SELECTOR, css)

    def els(self, css):
        return self.d.find_elements(self.By.CSS_SELECTOR, css)

    def text(self, css):
        return self.el(css).text

    def error(self):
        return self.js("const e = document.getElementById('error'); return e.hidden ? '' : e.textContent;")

    def notice(self):
        return self.js("const e = document.getElementById('notice'); return e.hidden ? '' : e.textContent;")

    def rows(self, table_id):
        """Each body row of a table: its data-* attributes plus {col: data-value} of its cells."""
        return self.js("""
            return [...document.querySelectorAll('#' + arguments[0] + ' tbody tr')].filter(tr => !tr.classList.contains('empty'))
              .map(tr => { const r = Object.assign({}, tr.dataset); r.hidden = tr.hidden;
                 for (const td of tr.querySelectorAll('td[data-col]')) r[td.dataset.col] = td.dataset.value ?? td.textContent;
                 r.text = tr.innerText; return r; });""", table_id)

    def fill(self, css, value):
        e = self.el(css)
        e.clear()
        e.send_keys(value)

    def select(self, css, value):
        from selenium.webdriver.support.ui import Select
        Select(self.el(css)).select_by_value(value)

    def alert(self, accept, timeout=5):
        a = wait_for(lambda: self._alert(), timeout, "a confirm dialog")
        text = a.text
        a.accept() if accept else a.dismiss()
        return text

    def _alert(self):
        try:
            return self.d.switch_to.alert
        except Exception:
            return None

    def console_errors(self):
        """Errors the page logged, less the API's refusals this test asks for on purpose."""
        try:
            logs = self.d.get_log("browser")
        except Exception:
            return []
        return [l["message"] for l in logs if l.get("level") == "SEVERE"
                and not any(s in l["message"] for s in (" 400 ", " 404 ", " 409 ", " 403 ", "(Bad Request)", "(Not Found)"))]

    def quit(self):
        try:
            self.d.quit()
        except Exception:
            pass


def ui_overview(b, api, admin):
    # Rates are sampled every second (run.sh): wait (bounded) for six samples with the ticker's traffic, so
    # the charts (and the screenshot) show a line, not a point.
    def enough():
        rates = api.get("/api/v1/overview")["rates"]
        busy = [r for r in rates if r["produced_per_s"] > 0 and r["consumed_per_s"] > 0]
        return len(busy) >= 6
    wait_for(enough, 120, "six rate samples with produced and consumed messages", interval=2)
    b.open("#/")
    o = api.get("/api/v1/overview")
    expect(b.text("#overview-version") == o["version"], "version %r, API %r" % (b.text("#overview-version"), o["version"]))
    expect(b.text("#overview-broker") == o["broker_name"], "broker %r" % b.text("#overview-broker"))
    expect(b.text("#overview-topics") == "{:,}".format(o["topics"]), "topics %r, API %s" % (b.text("#overview-topics"), o["topics"]))
    expect(b.text("#overview-groups") == "{:,}".format(o["groups"]), "groups %r, API %s" % (b.text("#overview-groups"), o["groups"]))
    ratio = float(b.el("#disk-bar").get_attribute("data-used-ratio"))
    expect(abs(ratio - o["disk"]["used_ratio"]) < 0.01, "disk bar ratio %s, API %s" % (ratio, o["disk"]["used_ratio"]))
    expect(o["disk"]["data_dir"] in b.text("#disk"), "data dir not shown")
    langs = {r["key"]: int(r["text"].split()[-1]) for r in b.rows("conn-by-language")}
    expect(langs.get("CPP", 0) >= 1, "connections by language %s" % langs)
    for chart in ("chart-produced", "chart-consumed"):
        n = int(b.el("#" + chart).get_attribute("data-points"))
        expect(n >= 1 and b.els("#%s path.line" % chart), "%s: %d points, no line" % (chart, n))
    return "version %s, %d rate samples charted" % (o["version"], len(o["rates"]))


def ui_topics(b, api, admin):
    b.open("#/topics")
    theirs = admin.topics()
    rows = {r["topic"]: r for r in b.rows("topics-table")}
    expect(set(rows) == set(theirs), "table %s, skiff admin topics %s" % (sorted(rows), sorted(theirs)))
    hidden = sorted(n for n, r in rows.items() if r["hidden"])
    system = sorted(t["name"] for t in api.get("/api/v1/topics")["topics"] if t["system"])
    expect(hidden == system, "hidden rows %s, the API's system topics %s" % (hidden, system))
    b.el("#topics-show-system").click()
    expect(not any(r["hidden"] for r in b.rows("topics-table")), "system topics still hidden after the toggle")
    r = rows[TOPIC]
    status = admin.topic_status(TOPIC)
    want = sum(mx - mn for mn, mx in status.values())
    expect(int(r["messages"]) == want, "%s messages %s, admin %d" % (TOPIC, r["messages"], want))
    expect(int(r["read_queues"]) == theirs[TOPIC]["read_queues"], "read queues %s" % r["read_queues"])
    link = b.el('#topics-table tr[data-topic="%s"] a.topic-link' % TOPIC)
    link.click()
    wait_for(lambda: b.js("return location.hash") == "#/topics/" + TOPIC and b.els("#topic-queues"), 10, "the topic page")
    return "%d topics as skiff admin (%d system, hidden until shown)" % (len(rows), len(hidden))


def ui_topic_page(b, api, admin):
    b.open("#/topics/" + TOPIC)
    expect(b.text("#topic-name") == TOPIC, "title %r" % b.text("#topic-name"))
    status = admin.topic_status(TOPIC)
    mine = {int(r["queue"]): (int(r["min_offset"]), int(r["max_offset"])) for r in b.rows("topic-queues")}
    expect(mine == status, "queues %s, skiff admin topic-status %s" % (mine, status))
    groups = {r["group"]: int(r["lag"]) for r in b.rows("topic-groups")}
    want = sum(r["lag"] for (t, _), r in admin.progress(GROUP).items() if t == TOPIC)
    expect(groups.get(GROUP) == want, "groups %s, admin lag of %s %d" % (groups, GROUP, want))
    href = b.el("#topic-browse-link").get_attribute("href")
    expect(href.endswith("#/messages?topic=" + TOPIC), "browse link %s" % href)
    b.el('#topic-groups tr[data-group="%s"] a' % GROUP).click()
    wait_for(lambda: b.js("return location.hash") == "#/groups/" + GROUP and b.els("#group-queues"), 10, "the group page via its link")
    return "offsets as topic-status, %s lag %d, links work" % (GROUP, want)


def ui_groups(b, api, admin):
    b.open("#/groups")
    rows = {r["group"]: r for r in b.rows("groups-table")}
    expect(GROUP in rows and TICKER_GROUP in rows, "rows %s" % sorted(rows))
    want = sum(r["lag"] for r in admin.progress(GROUP).values())
    expect(int(rows[GROUP]["lag"]) == want, "%s lag %s, skiff admin progress %d" % (GROUP, rows[GROUP]["lag"], want))
    expect(int(rows[GROUP]["members"]) == 0 and int(rows[TICKER_GROUP]["members"]) == 1,
           "members %s / %s" % (rows[GROUP]["members"], rows[TICKER_GROUP]["members"]))
    expect(int(rows[GROUP]["retry_max_times"]) == 16, "retry max times %s" % rows[GROUP]["retry_max_times"])
    return "%d groups; %s lag %d as skiff admin" % (len(rows), GROUP, want)


def group_rows(b):
    return {(r["topic"], int(r["queue"])): {"broker_offset": int(r["broker_offset"]), "consumer_offset": int(r["consumer_offset"]),
                                           "lag": int(r["lag"])} for r in b.rows("group-queues")}


def ui_group_page(b, api, admin):
    # Lag is sampled every second (run.sh): wait (bounded) for four samples, so it draws a line.
    wait_for(lambda: len(api.get("/api/v1/groups/" + GROUP)["lag_history"]) >= 4, 90, "four lag_history samples", interval=2)
    b.open("#/groups/" + GROUP)
    prog = admin.progress(GROUP)
    mine = group_rows(b)
    expect(mine == prog, "queues %s, skiff admin progress %s" % (mine, prog))
    expect(int(b.el("#group-lag").get_attribute("data-value")) == sum(r["lag"] for r in prog.values()), "total lag %s" % b.text("#group-lag"))
    n = int(b.el("#group-lag-chart").get_attribute("data-points"))
    expect(n >= 2 and b.els("#group-lag-chart path.line"), "lag chart has %d points" % n)
    expect(b.el("#group-retry-link").get_attribute("href").endswith("#/topics/" + q("%RETRY%" + GROUP)), "retry link")
    expect(b.el("#group-dlq-link").get_attribute("href").endswith("#/topics/" + q("%DLQ%" + GROUP)), "DLQ link")
    subs = [r["topic"] for r in b.rows("group-subscriptions")]
    return "%d queues as skiff admin progress, lag chart of %d points, subscriptions %s" % (len(mine), n, subs)


def ui_messages(b, api, admin):
    status = admin.topic_status(TOPIC)
    qid = max(status, key=lambda k: status[k][1] - status[k][0])
    mn, mx = status[qid]
    b.open("#/messages?topic=%s&queue=%d&from=%d&count=20" % (TOPIC, qid, mn))
    rows = b.rows("messages-table")
    offs = [int(r["offset"]) for r in rows]
    expect(offs == list(range(mn, min(mx, mn + 20))), "offsets %s, expected %d..%d" % (offs, mn, min(mx, mn + 20) - 1))
    api_ids = [m["msg_id"] for m in api.get("/api/v1/messages?topic=%s&queue=%d&from=%d&count=20" % (TOPIC, qid, mn))["messages"]]
    expect([r["msgId"] for r in rows] == api_ids, "ids differ from the API's")
    expect(b.el("#browse-topic").get_attribute("value") == TOPIC, "topic select shows %s" % b.el("#browse-topic").get_attribute("value"))
    # The form navigates to the same view with the new range.
    b.fill("#browse-from", str(mn + 1))
    b.fill("#browse-count", "2")
    b.el("#browse-submit").click()
    wait_for(lambda: [int(r["offset"]) for r in b.rows("messages-table")] == list(range(mn + 1, min(mx, mn + 3))), 10,
             "the form's range %d..%d" % (mn + 1, mn + 2))
    expect("from=%d" % (mn + 1) in b.js("return location.hash"), "the URL does not carry the range")
    return "queue %d offsets %d..%d, ids as the API" % (qid, offs[0], offs[-1])


def ui_message_detail(b, api, admin):
    b.open("#/messages?topic=%s&queue=0&from=0&count=5" % TOPIC)
    first = b.els("#messages-table a.msg-link")
    expect(first, "no message rows in queue 0")
    msg_id = first[0].text
    first[0].click()
    wait_for(lambda: b.els("#message-id") and b.text("#message-id") == msg_id, 10, "the message page")
    theirs = admin.message(msg_id, TOPIC)
    text = b.text("#message-body-text")
    expect(text == theirs["body"], "body %r, skiff admin message %r" % (text, theirs["body"]))
    pretty = b.text("#message-body-json")
    expect(json.loads(pretty) == json.loads(theirs["body"]) and "\n  " in pretty, "JSON not pretty-printed: %r" % pretty)
    hexdump = b.text("#message-body-hex")
    first_hex = "".join(theirs["body"].encode()[:16].hex()[i:i + 4] + " " for i in range(0, 32, 4)).strip()
    expect(first_hex in hexdump, "hex dump starts %r, expected %r" % (hexdump[:60], first_hex))
    props = {r["key"]: r["text"].split("\t", 1)[-1].strip() for r in b.rows("message-properties")}
    expect(props.get("source") == "console-test", "properties %s" % props)
    for k, v in theirs["properties"].items():
        expect(k in props, "property %s (skiff admin) missing on the page" % k)
    consumed = b.rows("message-consumed-by")
    expect(any(r["group"] == GROUP and r["consumed"] == "true" for r in consumed), "consume status %s" % consumed)
    # A view's empty slots must not show up as text.
    view_text = b.text("#view")
    expect("null" not in view_text and "undefined" not in view_text,
           "stray text on the message page: %r" % view_text[-200:])
    return "%s: body, JSON, hex and %d properties as skiff admin message" % (msg_id, len(props))


def ui_lookups(b, api, admin):
    b.open("#/messages")
    b.select("#lookup-key-topic", TOPIC)
    b.fill("#lookup-key", "order-12")
    b.el("#lookup-key-submit").click()
    rows = wait_for(lambda: b.rows("messages-table"), 10, "results by key")
    expect(len(rows) == 1 and "order-12" in rows[0]["keys"].split(), "by key order-12: %s" % rows)
    msg_id = rows[0]["msgId"]
    b.open("#/messages")
    b.fill("#lookup-id", msg_id)
    b.el("#lookup-id-submit").click()
    wait_for(lambda: b.els("#message-id") and b.text("#message-id") == msg_id, 10, "the message page by id")
    expect(json.loads(b.text("#message-body-text"))["order"] == 12, "body %r" % b.text("#message-body-text"))
    return "order-12 found by key, opened by id %s" % msg_id


def ui_errors(b, api, admin):
    notes = []
    for route, code in (("#/topics/NoSuchTopic", "404"), ("#/groups/NoSuchGroup", "404"),
                        ("#/messages/" + ABSENT_ID, "404"), ("#/messages/NoSuchMessageId", "400"), ("#/messages?topic=%s&queue=abc&from=0&count=20" % TOPIC, "400")):
        b.open(route, ready=False)
        err = wait_for(lambda: b.error(), 10, "an error shown at %s" % route)
        expect(code in err and len(err) > len("Error 404: "), "error at %s: %r" % (route, err))
        notes.append(err)
    expect(b.els("#browse-form"), "the browse form is gone after a bad query")
    return "; ".join(notes)


def ui_create_delete_topic(b, api, admin):
    name = "ConsoleUiTopic"
    b.open("#/topics")
    b.fill("#topic-create-name", name)
    b.fill("#topic-create-queues", "2")
    b.select("#topic-create-type", "DELAY")
    b.el("#topic-create-submit").click()
    wait_for(lambda: any(r["topic"] == name for r in b.rows("topics-table")), 10, "%s in the table" % name)
    expect(name in b.notice(), "notice %r" % b.notice())
    theirs = wait_for(lambda: admin.topics().get(name), 10, "%s in skiff admin topics" % name)
    expect(theirs["read_queues"] == 2 and theirs["message_type"] in (None, "DELAY"), "skiff admin: %s" % theirs)
    # Creating it again shows the API's 409.
    b.fill("#topic-create-name", name)
    b.el("#topic-create-submit").click()
    err = wait_for(lambda: b.error(), 10, "the duplicate's error")
    expect("409" in err, "duplicate create shows %r" % err)
    # Delete: dismissing the dialog keeps it, accepting deletes it.
    delete = '#topics-table button.delete-topic[data-topic="%s"]' % name
    b.el(delete).click()
    text = b.alert(accept=False)
    expect(name in text, "confirm text %r" % text)
    time.sleep(1)
    expect(name in admin.topics(), "dismissed dialog, but %s was deleted" % name)
    b.el(delete).click()
    b.alert(accept=True)
    wait_for(lambda: not any(r["topic"] == name for r in b.rows("topics-table")), 10, "%s gone from the table" % name)
    wait_for(lambda: name not in admin.topics(), 10, "%s gone from skiff admin topics" % name)
    return "created (2 queues, DELAY) and seen by skiff admin, 409 shown, delete dismissed then confirmed"


def ui_send_message(b, api, admin):
    b.open("#/topics/" + TOPIC)
    body = '{"ui": "send", "n": %d}' % now_ms()
    b.fill("#send-body", body)
    b.fill("#send-tag", "uiTag")
    b.fill("#send-keys", "ui-k1 ui-k2")
    b.fill("#send-properties", "color=blue\nsize = XL")
    b.el("#send-submit").click()
    msg_id = wait_for(lambda: b.els("#send-msg-id") and b.text("#send-msg-id"), 15, "the sent message's id")
    theirs = admin.message(msg_id, TOPIC)
    expect(theirs["body"] == body, "skiff admin message %s: body %r, sent %r" % (msg_id, theirs["body"], body))
    p = theirs["properties"]
    expect(p.get("color") == "blue" and p.get("size") == "XL" and p.get("TAGS") == "uiTag", "properties %s" % p)
    expect(set(p.get("KEYS", "").split()) == {"ui-k1", "ui-k2"}, "keys %r" % p.get("KEYS"))
    b.el("#send-msg-id").click()
    wait_for(lambda: b.els("#message-body-text") and b.text("#message-body-text") == body, 10, "the sent message's page")
    # Bad properties are refused in the page, before any request.
    b.open("#/topics/" + TOPIC)
    b.fill("#send-body", "x")
    b.fill("#send-properties", "no equals sign")
    b.el("#send-submit").click()
    err = wait_for(lambda: b.error(), 5, "the properties error")
    expect("line 1" in err, "error %r" % err)
    return "%s stored with body, tag, keys and properties (skiff admin message)" % msg_id


def ui_live_tail(b, client, producer):
    b.open("#/topics/" + TOPIC)
    wait_for(lambda: b.el("#tail-status").get_attribute("data-state") == "open", 15, "the tail to open")
    time.sleep(0.5)
    before = len(b.rows("tail-list"))
    body = "ui-tail-%d" % now_ms()
    r = client.send(producer, client.message(TOPIC, body, tags="tail", keys="ui-tail"))
    rows = wait_for(lambda: [x for x in b.rows("tail-list") if r.msg_id in (x["msgId"], x.get("uniqKey"))], 15,
                    "%s in the tail" % r.msg_id)
    expect("ui-tail" in rows[0]["text"], "row %r" % rows[0]["text"])
    expect(before == 0, "%d rows before the message was sent: the tail did not start at the end" % before)
    b.el("#tail-toggle").click()
    expect(b.el("#tail-status").get_attribute("data-state") == "closed", "pause did not close the stream")
    return "%s arrived in the tail after it opened" % r.msg_id


def ui_trace(b, client, producer):
    # A message's trace as a Java client with enableMsgTrace writes it: a message of
    # RMQ_SYS_TRACE_TOPIC keyed by the traced id, its body \x01-separated records ended by \x02
    # (TraceDataEncoder's layout), sent here by the C++ client, which has no tracer of its own.
    traced = "0A0B0C0D%024X" % int(now_ms())
    t0 = int(now_ms())
    records = [
        ["Pub", str(t0), "DefaultRegion", "ConsoleProducer", TOPIC, traced, "TagA", "k", "127.0.0.1:9876", "9", "4", "0",
         "7F00000100002A9F0000000000000000", "true", "10.0.0.5"],
        ["SubBefore", str(t0 + 40), "DefaultRegion", GROUP, "req-1", traced, "0", "k"],
        ["SubAfter", "req-1", traced, "30", "true", "k", "0", str(t0 + 70), GROUP],
    ]
    body = "".join("\x01".join(r) + "\x02" for r in records)
    client.send(producer, client.message("RMQ_SYS_TRACE_TOPIC", body, keys=traced))
    def shown():
        b.open("#/traces/" + traced)
        rows = b.els("#trace-events tbody tr[data-kind]")
        return [r.get_attribute("data-kind") for r in rows] or None
    kinds = wait_for(shown, 15, "the trace's events")
    SEEN["trace"] = traced
    expect(kinds == ["Pub", "SubBefore", "SubAfter"], "events %s" % kinds)
    expect(b.els("#trace-timeline"), "no timeline drawn")
    return "%s: %s on a timeline" % (traced, ", ".join(kinds))


def ui_reset_offset(b, api, admin):
    status = admin.topic_status(TOPIC)
    before = admin.progress(GROUP)
    b.open("#/groups/" + GROUP)
    b.select("#reset-topic", TOPIC)
    b.select("#reset-to", "earliest")
    b.el("#reset-submit").click()
    text = b.alert(accept=False)
    expect(GROUP in text and TOPIC in text, "confirm text %r" % text)
    time.sleep(1)
    expect(admin.progress(GROUP) == before, "dismissed dialog, but the offsets changed")
    expect(b.el("#reset-result").get_attribute("hidden") is not None, "a result shown after a dismissed dialog")
    b.el("#reset-submit").click()
    b.alert(accept=True)
    wait_for(lambda: b.el("#reset-result").is_displayed(), 15, "the reset's result")
    shown = {int(r["queue"]): int(r["offset"]) for r in b.rows("reset-offsets")}
    want = {qid: mn for qid, (mn, _) in status.items()}
    expect(shown == want, "page shows new offsets %s, expected the min offsets %s" % (shown, want))
    after = wait_for(lambda: (lambda p: p if all(p[(TOPIC, qid)]["consumer_offset"] == mn for qid, mn in want.items()) else None)(
        admin.progress(GROUP)), 15, "skiff admin progress to show the reset offsets")
    lag = sum(r["lag"] for r in after.values())
    b.open("#/groups/" + GROUP)
    expect(group_rows(b) == after, "the group page after the reset %s, skiff admin %s" % (group_rows(b), after))
    # Latest, through the API: lag 0.
    st, _, r = api.call("POST", "/api/v1/groups/%s/reset-offset" % GROUP, {"topic": TOPIC, "to": "latest", "confirm": True})
    expect(st == 200, "reset to latest: %s %s" % (st, short(r)))
    latest = {x["queue_id"]: x["offset"] for x in r["queues"]}
    expect(latest == {qid: mx for qid, (_, mx) in admin.topic_status(TOPIC).items()}, "latest offsets %s" % latest)
    wait_for(lambda: sum(x["lag"] for x in admin.progress(GROUP).values()) == 0, 15, "lag 0 after reset to latest")
    # A time: the store time of order-20, so each queue restarts at its first message stored then or later.
    m = api.get("/api/v1/messages?topic=%s&key=order-20" % TOPIC)["messages"][0]
    st, _, r = api.call("POST", "/api/v1/groups/%s/reset-offset" % GROUP, {"topic": TOPIC, "to": m["store_ms"], "confirm": True})
    expect(st == 200, "reset to a time: %s %s" % (st, short(r)))
    by_time = {x["queue_id"]: x["offset"] for x in r["queues"]}
    expect(by_time.get(m["queue_id"], -1) <= m["queue_offset"], "reset to order-20's store time %d put queue %d at %s, past its offset %d"
           % (m["store_ms"], m["queue_id"], by_time.get(m["queue_id"]), m["queue_offset"]))
    return "earliest (dialog dismissed, then accepted): %s, lag %d per skiff admin; latest: lag 0; by time %s" % (shown, lag, by_time)


def ui_dlq_resend(b, api, admin):
    # Dead letters as the broker writes them: in the group's %DLQ% topic, naming the topic they
    # came from in RETRY_TOPIC (made here through the API; tests/it/serve_console.rs makes one
    # with CONSUMER_SEND_MSG_BACK).
    dlq = "%DLQ%" + GROUP
    st, _, r = api.call("POST", "/api/v1/topics", {"name": dlq, "queues": 1})
    expect(st in (201, 409), "creating %s: %s %s" % (dlq, st, short(r)))
    letters = []
    for n in range(2):
        body = '{"dead": %d, "n": %d}' % (now_ms(), n)
        st, _, sent = api.call("POST", "/api/v1/topics/%s/messages" % urllib.parse.quote(dlq, safe=""),
                               {"body": body, "properties": {"RETRY_TOPIC": TOPIC}})
        expect(st == 200, "a dead letter: %s %s" % (st, short(sent)))
        letters.append((sent["msg_id"], body))
    letter, body = letters[0]
    SEEN["dead_letter"] = letter
    b.open("#/messages/" + letter)
    wait_for(lambda: b.els("#resend-message"), 10, "the dead letter's resend button")
    expect(TOPIC in b.text("#resend-message") and not b.els("#resent-marker"), "button %r before a resend" % b.text("#resend-message"))
    b.el("#resend-message").click()
    b.alert(accept=True)
    new_id = wait_for(lambda: b.els("#resent-id") and b.el("#resent-id").get_attribute("data-value"), 15, "the resent id")
    theirs = admin.message(new_id, TOPIC)
    expect(theirs["body"] == body, "skiff admin message %s: body %r, dead letter's %r" % (new_id, theirs["body"], body))
    # Opened again, the letter says it was resent and asks before a second resend.
    b.open("#/messages/" + letter)
    marker = wait_for(lambda: b.els("#resent-marker") and b.el("#resent-marker"), 10, "the resent marker")
    expect(new_id in marker.text and marker.get_attribute("data-count") == "1", "marker %r" % marker.text)
    before = sum(mx for _, mx in admin.topic_status(TOPIC).values())
    b.el("#resend-message").click()
    question = b.alert(accept=False)
    expect("already" in question, "the second resend's question %r" % question)
    time.sleep(1)
    expect(sum(mx for _, mx in admin.topic_status(TOPIC).values()) == before, "a dismissed second resend sent it")
    st, _, err = api.call("POST", "/api/v1/messages/%s/resend" % letter)
    expect(st == 409 and error_body(err), "a second resend without again: %s %s" % (st, short(err)))
    # Resend all from the group page: the other letter is resent, this one skipped.
    b.open("#/groups/" + GROUP)
    wait_for(lambda: b.els("#dlq-resend-all") and b.el("#dlq-resend-all").is_enabled(), 10, "the resend-all button")
    b.el("#dlq-resend-all").click()
    b.alert(accept=True)
    shown = wait_for(lambda: b.els("#dlq-resent-count") and b.el("#dlq-resent-count"), 15, "the resent count")
    count, skipped = int(shown.get_attribute("data-value")), int(shown.get_attribute("data-skipped"))
    after = sum(mx for _, mx in admin.topic_status(TOPIC).values())
    expect(count == 1 and skipped == 1 and after == before + 1,
           "resend all: %d resent, %d skipped shown, %d -> %d stored in %s" % (count, skipped, before, after, TOPIC))
    # Asked for again, the API resends it once more.
    st, _, again = api.call("POST", "/api/v1/messages/%s/resend" % letter, {"again": True})
    expect(st == 200 and again["from"] == letter, "resend with again: %s %s" % (st, short(again)))
    resent = api.get("/api/v1/messages/" + letter)["resent"]
    expect(len(resent) == 2 and resent[0]["msg_id"] == new_id, "resent list %s" % short(resent))
    return "resent once from its page (%s), marked, asked before again, 409 without again; resend all skipped it" % new_id


# ---- main ------------------------------------------------------------------------------------------------

def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--namesrv", required=True)
    p.add_argument("--http", required=True)
    p.add_argument("--skiff", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--screenshots", default=None)
    a = p.parse_args(argv)
    # page_checks imports this file by name: one module, so its Check is the one check() catches.
    sys.modules.setdefault("browser_test", sys.modules[__name__])
    import page_checks

    api = Http(a.http)
    admin = Admin(a.skiff, a.namesrv)
    client = Client(a.namesrv, os.path.join(a.work, "client-logs"))
    ticker = browser = producer = None
    try:
        try:
            ticker = Ticker(client, admin)
            t0 = time.monotonic()
            make_data(client, admin)
            record("setup_data", True, "%d messages to %s, %s consumed %d and stopped (%.1fs)"
                   % (FIRST_BATCH + SECOND_BATCH, TOPIC, GROUP, FIRST_BATCH, time.monotonic() - t0))
        except Exception as e:
            record("setup_data", False, "%s: %s" % (type(e).__name__, e))
            traceback.print_exc(file=sys.stderr)
            return

        # Read-only first, while the state is the one made above.
        check("page_files", page_files, api)
        check("api_overview", api_overview, api, admin)
        check("api_overview_disk", api_overview_disk, api, admin)
        check("api_overview_connections", api_overview_connections, api, admin)
        check("api_topics", api_topics, api, admin)
        check("api_topic_detail", api_topic_detail, api, admin)
        check("api_not_found", api_not_found, api, admin)
        check("api_groups", api_groups, api, admin)
        check("api_group_detail", api_group_detail, api, admin)
        check("api_messages", api_messages, api, admin)
        check("api_message_by_key", api_message_by_key, api, admin)
        check("api_bad_input", api_bad_input, api, admin)
        check("api_csrf_guard", api_csrf_guard, api, admin)
        check("api_unknown_route", page_checks.api_unknown_route, api, admin)
        check("api_group_lifecycle", page_checks.api_group_lifecycle, api, admin)

        try:
            browser = Browser(a.http, a.work, a.screenshots)
        except Exception as e:
            record("ui_browser", False, "cannot start Chromium: %s: %s" % (type(e).__name__, e))
            return
        check("ui_topics", ui_topics, browser, api, admin)
        check("ui_topic_page", ui_topic_page, browser, api, admin)
        check("ui_groups", ui_groups, browser, api, admin)
        check("ui_messages", ui_messages, browser, api, admin)
        check("ui_message_detail", ui_message_detail, browser, api, admin)
        check("ui_lookups", ui_lookups, browser, api, admin)
        check("ui_errors", ui_errors, browser, api, admin)
        check("ui_overview", ui_overview, browser, api, admin)
        # After the overview's wait, so the lag chart has more than a sample or two.
        check("ui_group_page", ui_group_page, browser, api, admin)
        check("ui_lag_ticks_and_history_note", page_checks.ui_lag_ticks_and_history_note, browser, api, admin)
        check("ui_times_carry_zone", page_checks.ui_times_carry_zone, browser, api, admin)
        check("ui_overview_store_bytes", page_checks.ui_overview_store_bytes, browser, api, admin)
        check("ui_reset_preselects_subscribed_topic", page_checks.ui_reset_preselects_subscribed_topic, browser, api, admin)
        check("ui_browse_limit", page_checks.ui_browse_limit, browser, api, admin)
        check("ui_group_members", page_checks.ui_group_members, browser, api, admin)
        check("ui_cluster", page_checks.ui_cluster, browser, api, admin)
        check("ui_time_search", page_checks.ui_time_search, browser, api, admin)

        # Then the checks that change state.
        check("api_topic_lifecycle", api_topic_lifecycle, api, admin)
        check("api_send", api_send, api, admin)
        producer = client.producer("ConsoleTailProducer")
        check("api_tail", api_tail, api, client, producer)
        check("api_find_by_producer_id", page_checks.api_find_by_producer_id, api, admin, client, producer)
        check("ui_find_by_producer_id", page_checks.ui_find_by_producer_id, browser, client, producer)
        check("ui_pages_refresh", page_checks.ui_pages_refresh, browser, api, admin)
        check("ui_producers", page_checks.ui_producers, browser, api, admin)
        check("ui_group_create_edit_delete", page_checks.ui_group_create_edit_delete, browser, api, admin)
        check("ui_create_delete_topic", ui_create_delete_topic, browser, api, admin)
        check("ui_send_message", ui_send_message, browser, api, admin)
        check("ui_live_tail", ui_live_tail, browser, client, producer)
        check("ui_trace", ui_trace, browser, client, producer)
        check("ui_reset_offset", ui_reset_offset, browser, api, admin)
        check("ui_dlq_resend", ui_dlq_resend, browser, api, admin)
        check("ui_lite_topics", page_checks.ui_lite_topics, browser, api, admin, a.screenshots)
        order7 = api.get("/api/v1/messages?topic=%s&key=order-7" % TOPIC)["messages"][0]["msg_id"]
        pages = [("overview", "#/"), ("topics", "#/topics"), ("topic", "#/topics/" + TOPIC), ("groups", "#/groups"),
                 ("group", "#/groups/" + GROUP), ("messages", "#/messages?topic=%s&queue=0&from=0&count=20" % TOPIC),
                 ("message", "#/messages/" + order7), ("dead-letter", "#/messages/" + SEEN.get("dead_letter", "")),
                 ("trace", "#/traces/" + SEEN.get("trace", ""))]
        pages += page_checks.MORE_PAGES
        check("ui_page_layout", page_checks.page_layout, browser, api, admin, pages, a.screenshots)
        # Last: its first user turns ACL on until its last one is deleted.
        check("ui_users", page_checks.ui_users, browser, api, admin, a.screenshots)
        errors = browser.console_errors()
        record("ui_no_script_errors", not errors, "; ".join(errors[:5]) if errors else "no errors in the browser console")
    finally:
        if browser:
            browser.quit()
        for closer in (producer.shutdown if producer else None, ticker.close if ticker else None):
            if closer:
                try:
                    closer()
                except Exception as e:
                    log("shutdown: %s" % e)
        passed = sum(1 for _, ok in RESULTS if ok)
        print("%d passed, %d failed" % (passed, len(RESULTS) - passed), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0 if RESULTS and all(ok for _, ok in RESULTS) else 1)
