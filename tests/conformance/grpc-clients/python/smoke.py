#!/usr/bin/env python3
"""gRPC smoke with the official RocketMQ 5 Python client (PyPI rocketmq-python-client 5.1.2).

    python smoke.py --endpoint HOST:PORT --topic T --group G [--tls on|off] [--count 10]
                    [--priority-topic P] [--lite-topic L --lite-group LG]

The topic (NORMAL, 4 queues) and the group must exist: grpc-clients.sh creates them over
remoting first. Starts a SimpleConsumer (tag filter), then a Producer, sends COUNT messages
(tag, two keys, a user property), receives them with receive + ack (10 s invisible duration) and
checks message id, topic, body, tag, keys and the user property of each; then keeps receiving
until 13 s after the last message came in (past the invisible duration, so an ack that did not
take would show) and expects nothing. With --priority-topic (a PRIORITY topic of 8 queues, same
group): priorities 3, 0, 7, 5, 1, 99, 6, 2, 4 sent before the first receive come back one
receive at a time as 7, 99, 6, 5, 4, 3, 2, 1, 0 (RocketMQ 5.4's priority messages; the client has
`Message.priority` since 5.1.1), each with its priority. With --lite-topic (a LITE parent topic)
and --lite-group (a group bound to it, lite.bind.topic): a LitePushConsumer (RocketMQ 5.5's lite
topics; the client has it since 5.1.1) subscribes lite topic py-chat-1, three messages sent to
it arrive, each once, and one sent to py-chat-2 (not subscribed) does not within 3 s more; after
unsubscribe_lite, one more sent to py-chat-1 does not arrive either. Prints PASS/FAIL lines;
exit 0 iff it passed.

TLS: tls_enable=True makes the client open grpc.aio.secure_channel with
grpc.ssl_channel_credentials() (the default roots), i.e. it verifies the server's certificate and
its host name, and has no option to skip that. Test brokers serve a self-signed certificate (the
Apache proxy's test mode: CN=localhost, no SAN) while routes name 127.0.0.1, so with --tls on this
script fetches the server's certificate from the endpoint (unverified) and makes the client's
secure channels trust exactly that certificate, with the gRPC channel option
grpc.ssl_target_name_override set to its CN (or first DNS SAN). The handshake, ALPN h2 and the
certificate check still happen; only the trust anchor and the expected name are the test's.
"""
import argparse
import os
import ssl
import sys
import tempfile
import time

import grpc

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression,
                      LitePushConsumer, Message, MessageListener, Producer, SimpleConsumer)

INVISIBLE_S = 10
QUIET_AFTER_S = INVISIBLE_S + 3
TAG = "smoke-tag"


def log(msg):
    print(f"[python {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def trust_server_certificate(endpoint):
    """Make grpc.aio.secure_channel trust the certificate the server at ENDPOINT presents."""
    host, port = endpoint.rsplit(":", 1)
    pem = ssl.get_server_certificate((host, int(port)))
    with tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False) as f:
        f.write(pem)
    try:
        info = ssl._ssl._test_decode_cert(f.name)  # noqa: SLF001 - stdlib PEM decoder
    finally:
        os.unlink(f.name)
    names = [v for k, v in info.get("subjectAltName", ()) if k == "DNS"]
    names += [v for rdn in info.get("subject", ()) for k, v in rdn if k == "commonName"]
    if not names:
        raise RuntimeError(f"the certificate of {endpoint} names no host: {info}")
    creds = grpc.ssl_channel_credentials(root_certificates=pem.encode())
    orig = grpc.aio.secure_channel

    def secure_channel(target, _credentials, options=None, *args, **kwargs):
        opts = list(options or []) + [("grpc.ssl_target_name_override", names[0])]
        return orig(target, creds, opts, *args, **kwargs)

    grpc.aio.secure_channel = secure_channel
    log(f"TLS: trusting the server's certificate {info.get('subject')} as {names[0]!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--tls", choices=["on", "off"], default="off")
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--priority-topic")
    ap.add_argument("--lite-topic")
    ap.add_argument("--lite-group")
    a = ap.parse_args()
    tls = a.tls == "on"
    run = f"{int(time.time() * 1000)}"
    problems = []
    if tls:
        trust_server_certificate(a.endpoint)

    conf = ClientConfiguration(a.endpoint, Credentials(), request_timeout=10)
    consumer = SimpleConsumer(conf, a.group, {a.topic: FilterExpression(TAG)},
                              await_duration=5, tls_enable=tls)
    topics = tuple(t for t in (a.topic, a.priority_topic, a.lite_topic) if t)
    producer = Producer(conf, topics, tls_enable=tls)
    consumer.startup()
    log(f"consumer started ({a.endpoint}, tls {a.tls})")
    producer.startup()
    log("producer started")

    sent = {}  # message id -> (index, body)
    try:
        for i in range(a.count):
            m = Message()
            m.topic = a.topic
            m.body = f"python smoke {run} #{i}".encode()
            m.tag = TAG
            m.keys = f"pykey-{run}-{i}"  # the setter adds one key per assignment
            m.keys = f"pykey-{run}"
            m.add_property("smoke-index", str(i))
            r = producer.send(m)
            if not r.message_id:
                problems.append(f"send #{i}: empty message id")
            if r.message_id in sent:
                problems.append(f"send #{i}: message id {r.message_id} repeated")
            sent[r.message_id] = (i, m.body)
        log(f"sent {len(sent)}")

        got = {}
        deadline = time.time() + 60
        last_msg_at = time.time()
        while len(got) < len(sent) and time.time() < deadline:
            msgs = consumer.receive(32, INVISIBLE_S)
            for msg in msgs or []:
                last_msg_at = time.time()
                mid = msg.message_id
                if mid in got:
                    problems.append(f"{mid}: received twice before the ack window")
                if mid not in sent:
                    problems.append(f"unexpected message {mid} body {msg.body!r}")
                else:
                    i, body = sent[mid]
                    want_keys = {f"pykey-{run}-{i}", f"pykey-{run}"}
                    checks = [
                        ("topic", msg.topic, a.topic),
                        ("body", msg.body, body),
                        ("tag", msg.tag, TAG),
                        ("keys", set(msg.keys or ()), want_keys),
                        ("property smoke-index", (msg.properties or {}).get("smoke-index"), str(i)),
                        ("delivery attempt", msg.delivery_attempt, 1),
                    ]
                    for what, have, want in checks:
                        if have != want:
                            problems.append(f"#{i} {mid}: {what} {have!r}, want {want!r}")
                got[mid] = msg
                consumer.ack(msg)
        log(f"received and acked {len(got)}")
        missing = [sent[m][0] for m in sent if m not in got]
        if missing:
            problems.append(f"not received within 60 s: #{sorted(missing)}")

        # Nothing may come back: receive until QUIET_AFTER_S after the last message.
        while time.time() < last_msg_at + QUIET_AFTER_S:
            for msg in consumer.receive(32, INVISIBLE_S) or []:
                problems.append(f"after ack: {msg.message_id} came again "
                                f"(attempt {msg.delivery_attempt}, body {msg.body!r})")
                consumer.ack(msg)
        log("quiet window over")
        if a.priority_topic:
            problems.extend(check_priority(conf, a, tls, producer))
        if a.lite_topic:
            problems.extend(check_lite(conf, a, tls, producer))
    except Exception as e:  # noqa: BLE001 - any client error fails the smoke
        problems.append(f"{type(e).__name__}: {e}")
    finally:
        for c in (producer, consumer):
            try:
                c.shutdown()
            except Exception as e:  # noqa: BLE001
                log(f"shutdown: {e}")

    name = f"python.{'tls' if tls else 'plain'}"
    if problems:
        for p in problems:
            print(f"  {p}")
        print(f"FAIL {name}: {len(problems)} problem(s), first: {problems[0]}")
        return 1
    priority = ", priorities received highest first" if a.priority_topic else ""
    lite = ", a subscribed lite topic delivered and the others not" if a.lite_topic else ""
    print(f"PASS {name}: {a.count} sent, received with tag/keys/property, acked, none back in {QUIET_AFTER_S} s{priority}{lite}")
    return 0


PRIORITIES = [3, 0, 7, 5, 1, 99, 6, 2, 4]
PRIORITY_ORDER = [7, 99, 6, 5, 4, 3, 2, 1, 0]


def check_priority(conf, a, tls, producer):
    """A backlog of priority messages comes back highest queue first; the problems found."""
    problems = []
    consumer = SimpleConsumer(conf, a.group, {a.priority_topic: FilterExpression()},
                              await_duration=5, tls_enable=tls)
    consumer.startup()
    try:
        for p in PRIORITIES:
            m = Message()
            m.topic = a.priority_topic
            m.body = f"p{p}".encode()
            m.priority = p
            producer.send(m)
        got = []
        deadline = time.time() + 60
        while len(got) < len(PRIORITIES) and time.time() < deadline:
            for msg in consumer.receive(1, INVISIBLE_S) or []:
                got.append((msg.body.decode(), msg.priority))
                consumer.ack(msg)
        want = [(f"p{p}", p) for p in PRIORITY_ORDER]
        if got != want:
            problems.append(f"priority: received {got}, want {want}")
        log(f"priority messages received in order: {[b for b, _ in got]}")
    finally:
        consumer.shutdown()
    return problems


class Recorder(MessageListener):
    """Keeps (lite topic, body) of each message it is given, and acknowledges it."""

    def __init__(self):
        self.got = []

    def consume(self, message):
        self.got.append((message.lite_topic, message.body.decode()))
        return ConsumeResult.SUCCESS

    def of(self, lite):
        return sorted(body for topic, body in self.got if topic == lite)


def send_lite(producer, parent, lite, body):
    m = Message()
    m.topic = parent
    m.lite_topic = lite
    m.body = body.encode()
    producer.send(m)


def wait_for(condition, seconds):
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.1)
    return condition()


def check_lite(conf, a, tls, producer):
    """A lite push consumer gets the lite topics it subscribed and no other; the problems found."""
    problems = []
    recorder = Recorder()
    consumer = LitePushConsumer(conf, a.lite_group, a.lite_topic, recorder, tls_enable=tls)
    consumer.startup()
    try:
        consumer.subscribe_lite("py-chat-1")
        for i in range(3):
            send_lite(producer, a.lite_topic, "py-chat-1", f"one-{i}")
        send_lite(producer, a.lite_topic, "py-chat-2", "two-0")
        want = ["one-0", "one-1", "one-2"]
        if not wait_for(lambda: len(recorder.of("py-chat-1")) >= 3, 30):
            problems.append(f"lite: py-chat-1 delivered {recorder.of('py-chat-1')} in 30 s, want {want}")
        # Three seconds more: a second delivery, or py-chat-2's message, would come by then.
        time.sleep(3)
        if recorder.of("py-chat-1") != want:
            problems.append(f"lite: py-chat-1 delivered {recorder.of('py-chat-1')}, want {want}")
        if recorder.of("py-chat-2"):
            problems.append(f"lite: py-chat-2, never subscribed, delivered {recorder.of('py-chat-2')}")
        consumer.unsubscribe_lite("py-chat-1")
        send_lite(producer, a.lite_topic, "py-chat-1", "one-late")
        time.sleep(3)
        if "one-late" in recorder.of("py-chat-1"):
            problems.append("lite: a message sent after unsubscribe_lite was delivered")
        log(f"lite messages received: {recorder.got}")
    finally:
        consumer.shutdown()
    return problems


if __name__ == "__main__":
    sys.exit(main())
