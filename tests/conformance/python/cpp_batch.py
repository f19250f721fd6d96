#!/usr/bin/env python3
"""Conformance scenario with the C++ client (PyPI ``rocketmq`` 0.4.4, which bundles an old
rocketmq-client-cpp): ``Producer.send_batch`` of three messages, then a push consumer group
(CONSUME_FROM_FIRST_OFFSET) reads the topic.

That client sends the batch as SEND_MESSAGE (10) with the V1 header field ``batch: "1"``
(``UtilAll::to_string(bool)`` before rocketmq-client-cpp #334). A Java broker decides batch or
single by that field with ``Boolean.parseBoolean``, so "1" is false and Apache RocketMQ stores
the whole MessageBatch encoding (3 records, 324 bytes here) as the body of ONE message without
tags. The consumer's C API returns bodies as C strings, so that body reads as "" (it starts with
a zero byte). The expectation below is what Apache does: one message, no tags, no keys, stored
size at least the encoded batch's length.

skiff deliberately differs (its README and docs/wire-protocol.md §9): it reads "1" as true, as it
reads every boolean, so with `--broker skiff` the expectation is the three messages the client
sent, with their bodies, tags, keys and properties.

  cpp_batch.py --namesrv 127.0.0.1:PORT --broker skiff|apache [--log-dir DIR] [--timeout SECS]

Prints one line ``PASS cpp_send_batch (secs): ...`` or ``FAIL cpp_send_batch (secs): ...`` and
exits 0 / 1 (2 for a usage or import error). The client's own logs go to --log-dir.
"""

import argparse
import ctypes
import os
import sys
import tempfile
import threading
import time
import uuid

NAME = "cpp_send_batch"
CONSUME_FROM_FIRST_OFFSET = 4  # rocketmq-client-cpp include/ConsumeType.h
LOG_LEVEL_WARN = 3
SET_CONSUME_FROM_WHERE = "_ZN8rocketmq21DefaultMQPushConsumer19setConsumeFromWhereENS_16ConsumeFromWhereE"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--broker", choices=["skiff", "apache"], required=True)
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--timeout", type=float, default=25.0)
    a = ap.parse_args()
    t0 = time.monotonic()

    def report(ok, what):
        print("%s %s (%.1fs): %s" % ("PASS" if ok else "FAIL", NAME, time.monotonic() - t0, what))
        sys.stdout.flush()
        return 0 if ok else 1

    try:
        from rocketmq.client import Message, Producer, PushConsumer, SendStatus
        from rocketmq.ffi import dll, MessageModel
    except Exception as e:  # missing package or library
        return report(False, "cannot import rocketmq 0.4.4: %s" % e) or 2

    log_dir = a.log_dir or tempfile.mkdtemp(prefix="cf-cpp-log-")
    run = uuid.uuid4().hex[:8]
    topic, group = "cf_cpp_batch_t_" + run, "cf_cpp_batch_cg_" + run

    def logs(set_path, set_level, handle, name):
        path = os.path.join(log_dir, name)
        os.makedirs(path, exist_ok=True)
        set_path.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        set_level.argtypes = [ctypes.c_void_p, ctypes.c_int]
        set_path(handle, path.encode())
        set_level(handle, LOG_LEVEL_WARN)

    sent = [("batch-%d" % i, "Tag%s" % "ABC"[i], "key-%d" % i) for i in range(3)]
    producer = Producer(group + "_pg")
    producer.set_namesrv_addr(a.namesrv)
    logs(dll.SetProducerLogPath, dll.SetProducerLogLevel, producer._handle, "producer")
    producer.start()
    try:
        msgs = []
        for body, tags, keys in sent:
            m = Message(topic)
            m.set_body(body)
            m.set_tags(tags)
            m.set_keys(keys)
            m.set_property("idx", body[-1])
            msgs.append(m)
        try:
            r = producer.send_batch(msgs)
        except Exception as e:
            return report(False, "send_batch raised %s: %s" % (type(e).__name__, e))
        send_note = "send_batch: status %s, msg_id %s, offset %s" % (r.status.name, r.msg_id, r.offset)
        if r.status != SendStatus.OK:
            return report(False, send_note)
    finally:
        producer.shutdown()

    got, cond = [], threading.Condition()

    def on_message(msg):
        body = msg.body.decode("utf-8", "replace") if msg.body is not None else None
        with cond:
            got.append((body, msg.tags.decode() if isinstance(msg.tags, bytes) else msg.tags,
                        msg.keys.decode() if isinstance(msg.keys, bytes) else msg.keys,
                        msg.get_property("idx"), msg.queue_id, msg.queue_offset, msg.store_size))
            cond.notify_all()

    consumer = PushConsumer(group, message_model=MessageModel.CLUSTERING)
    consumer.set_namesrv_addr(a.namesrv)
    logs(dll.SetPushConsumerLogPath, dll.SetPushConsumerLogLevel, consumer._handle, "consumer")
    try:
        cfw = getattr(dll, SET_CONSUME_FROM_WHERE)
        cfw.argtypes = [ctypes.c_void_p, ctypes.c_int]
        cfw.restype = None
        cfw(consumer._handle, CONSUME_FROM_FIRST_OFFSET)
    except AttributeError:
        pass  # library default LAST_OFFSET; a young queue still starts at 0
    consumer.subscribe(topic, on_message, "*")
    consumer.start()
    try:
        deadline = time.monotonic() + a.timeout
        want = 3 if a.broker == "skiff" else 1
        with cond:
            while len(got) < want and time.monotonic() < deadline:
                cond.wait(max(0.0, deadline - time.monotonic()))
            # Nothing marks "no more messages": allow a bounded time for an unexpected extra one.
            extra_deadline = min(deadline, time.monotonic() + 3.0)
            while len(got) == want and time.monotonic() < extra_deadline:
                cond.wait(max(0.0, extra_deadline - time.monotonic()))
    except BaseException:
        consumer.shutdown()
        raise
    # The verdict is printed before the consumer shuts down: this client's shutdown sometimes
    # dies with `boost::thread_interrupted`, which must not swallow what was observed.
    with cond:
        observed = sorted(got, key=lambda g: (g[4], g[5]))
    detail = "%s; received %s" % (send_note, [
        (b if b is None or len(b) < 60 else b[:60] + "...", t, k, "q%s@%s" % (q, o), "store_size=%s" % z)
        for b, t, k, p, q, o, z in observed])
    problems = []
    if a.broker == "skiff":
        expected = [(body, tags, keys, body[-1]) for body, tags, keys in sent]
        received = sorted((b, t or "", k or "", p.decode() if isinstance(p, bytes) else p)
                          for b, t, k, p, q, o, z in observed)
        if received != expected:
            problems.append("expected the three sent messages %r, observed %r" % (expected, received))
    else:
        if len(observed) != 1:
            problems.append("expected 1 message (the batch stored whole, as Apache does), observed %d" % len(observed))
        for b, t, k, p, q, o, z in observed:
            if (b, t or "", k or "") != ("", "", ""):
                problems.append("expected empty C-string body, no tags, no keys; observed %r" % ((b, t, k),))
            if z is None or z < 324:
                problems.append("stored size %s is smaller than the 324-byte batch encoding" % z)
    verdict = report(not problems, detail if not problems else "%s || %s" % (" | ".join(problems), detail))
    consumer.shutdown()
    return verdict


if __name__ == "__main__":
    sys.exit(main())
