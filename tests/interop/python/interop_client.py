#!/usr/bin/env python3
"""Interop driver: PyPI ``rocketmq==0.4.4`` (ctypes over the bundled rocketmq-client-cpp
library) against ``skiff serve``.

Same command line and output as tests/interop/rust-client:

  interop_client.py --namesrv ADDR --topic T --group G --count N --mode produce
  interop_client.py --namesrv ADDR --topic T --group G --count N --mode consume [--timeout S] [--linger S]
  interop_client.py --namesrv ADDR --topic T --group G --count N --mode consume --expect-none S

* produce: a ``Producer`` sends bodies ``msg-0`` .. ``msg-{N-1}`` with ``send_sync``; every send
  must come back ``SendStatus.OK``.
* consume: a ``PushConsumer`` (clustering, concurrent listener, CONSUME_FROM_FIRST_OFFSET) runs
  until all N distinct bodies arrived or ``--timeout`` passed, keeps running ``--linger`` seconds
  (the C++ client persists offsets every 5 s) and shuts down cleanly (which persists once more).
* consume --expect-none S: runs the group for S seconds and fails if any message arrives; then
  sends one probe message and requires the consumer to receive it within ``--timeout``, which
  proves it was rebalanced and pulling during the quiet window.

The C API that the package wraps has no setter for consumeFromWhere (CreatePushConsumer sets
CONSUME_FROM_LAST_OFFSET). The C handle *is* the C++ ``DefaultMQPushConsumer*``
(``CreatePushConsumer`` returns ``(CPushConsumer*)new DefaultMQPushConsumer(...)``), and the
library exports the C++ member ``DefaultMQPushConsumer::setConsumeFromWhere(ConsumeFromWhere)``,
so it is called through ctypes with the handle as ``this`` (CONSUME_FROM_FIRST_OFFSET = 4 in
``include/ConsumeType.h``). Without the symbol the script says so and keeps the default.

Output: one ``RESULT ...`` line on stdout; client logs go to ``--log-dir``.
Exit code 0 = pass, 1 = check failed, 2 = usage or client error.
"""

import argparse
import ctypes
import os
import sys
import tempfile
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer, SendStatus
from rocketmq.ffi import dll, MessageModel

CONSUME_FROM_FIRST_OFFSET = 4  # rocketmq-client-cpp include/ConsumeType.h
LOG_LEVEL_WARN = 3  # rocketmq.ffi._CLogLevel.WARN
SET_CONSUME_FROM_WHERE = "_ZN8rocketmq21DefaultMQPushConsumer19setConsumeFromWhereENS_16ConsumeFromWhereE"


def body_of(i):
    return "msg-%d" % i


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--count", required=True, type=int)
    p.add_argument("--mode", required=True, choices=["produce", "consume"])
    p.add_argument("--timeout", type=float, default=120.0,
                   help="consume: give up after this many seconds; expect-none: wait this long for the probe")
    p.add_argument("--linger", type=float, default=6.0,
                   help="consume: keep running this long after the last body arrived")
    p.add_argument("--expect-none", type=float, default=None, metavar="SECONDS")
    p.add_argument("--log-dir", default=None, help="directory for the C++ client's log files")
    a = p.parse_args(argv)
    if a.expect_none is not None and a.mode != "consume":
        p.error("--expect-none only applies to --mode consume")
    for name in ("timeout", "linger", "expect_none"):
        v = getattr(a, name)
        if v is not None and not (0 <= v <= 3600):
            p.error("--%s: expected seconds in 0..3600" % name.replace("_", "-"))
    if a.log_dir is None:
        a.log_dir = tempfile.mkdtemp(prefix="skiff-interop-py-log-")
    os.makedirs(a.log_dir, exist_ok=True)
    return a


def configure_logs(set_path, set_level, handle, log_dir, name):
    path = os.path.join(log_dir, name)
    os.makedirs(path, exist_ok=True)
    set_path.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    set_level.argtypes = [ctypes.c_void_p, ctypes.c_int]
    set_path(handle, path.encode())
    set_level(handle, LOG_LEVEL_WARN)


def new_producer(args, group, instance=None):
    producer = Producer(group)
    producer.set_namesrv_addr(args.namesrv)
    if instance is not None:
        dll.SetProducerInstanceName.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        dll.SetProducerInstanceName(producer._handle, instance.encode())
    configure_logs(dll.SetProducerLogPath, dll.SetProducerLogLevel, producer._handle, args.log_dir, "producer")
    return producer


def make_message(topic, body, tags):
    msg = Message(topic)
    msg.set_tags(tags)
    msg.set_body(body)
    return msg


def produce(args):
    producer = new_producer(args, args.group + "_producer")
    producer.start()
    started = time.monotonic()
    ok, failed = 0, []
    try:
        for i in range(args.count):
            try:
                r = producer.send_sync(make_message(args.topic, body_of(i), "interop"))
                if r.status == SendStatus.OK:
                    ok += 1
                else:
                    failed.append("%s: status %s" % (body_of(i), r.status))
            except Exception as e:  # the package raises its own exception types
                failed.append("%s: %s: %s" % (body_of(i), type(e).__name__, e))
    finally:
        elapsed = time.monotonic() - started
        producer.shutdown()
    for f in failed[:20]:
        print("send failed: " + f, file=sys.stderr)
    print("RESULT client=python mode=produce topic=%s sent_ok=%d failed=%d elapsed_s=%.2f"
          % (args.topic, ok, len(failed), elapsed))
    return 0 if ok == args.count and not failed else 1


class Recorder(object):
    def __init__(self):
        self.cond = threading.Condition()
        self.counts = {}
        self.deliveries = 0
        self.reconsumed = 0  # deliveries with reconsume_times > 0 (came back through %RETRY%)
        self.first_at = None

    def __call__(self, msg):
        body = msg.body
        body = body.decode("utf-8", "replace") if body is not None else "<no body>"
        reconsumed = msg.reconsume_times > 0
        with self.cond:
            self.deliveries += 1
            self.reconsumed += 1 if reconsumed else 0
            if self.first_at is None:
                self.first_at = time.monotonic()
            self.counts[body] = self.counts.get(body, 0) + 1
            self.cond.notify_all()

    def wait_until(self, pred, deadline):
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True


def start_consumer(args, recorder):
    consumer = PushConsumer(args.group, message_model=MessageModel.CLUSTERING)
    consumer.set_namesrv_addr(args.namesrv)
    configure_logs(dll.SetPushConsumerLogPath, dll.SetPushConsumerLogLevel, consumer._handle, args.log_dir, "consumer")
    try:
        set_cfw = getattr(dll, SET_CONSUME_FROM_WHERE)
        set_cfw.argtypes = [ctypes.c_void_p, ctypes.c_int]
        set_cfw.restype = None
        set_cfw(consumer._handle, CONSUME_FROM_FIRST_OFFSET)
        cfw = "CONSUME_FROM_FIRST_OFFSET"
    except AttributeError:
        cfw = "CONSUME_FROM_LAST_OFFSET (library default; setter symbol not exported)"
        print("warning: cannot set consumeFromWhere, using " + cfw, file=sys.stderr)
    consumer.subscribe(args.topic, recorder, "*")
    consumer.start()
    return consumer, cfw


def ranges(xs):
    out, i = [], 0
    while i < len(xs) and len(out) < 30:
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else "%d-%d" % (xs[i], xs[j]))
        i = j + 1
    if i < len(xs):
        out.append("...")
    return ",".join(out)


def expected_index(body, count):
    if not body.startswith("msg-"):
        return None
    try:
        i = int(body[4:])
    except ValueError:
        return None
    return i if 0 <= i < count else None


def consume(args):
    rec = Recorder()
    started = time.monotonic()
    consumer, cfw = start_consumer(args, rec)
    expected = [body_of(i) for i in range(args.count)]
    complete = rec.wait_until(lambda: all(b in rec.counts for b in expected), started + args.timeout)
    all_s = time.monotonic() - started
    if complete:
        time.sleep(args.linger)  # let a periodic offset persist (5 s) run before the clean shutdown
    t = time.monotonic()
    consumer.shutdown()
    shutdown_s = time.monotonic() - t
    with rec.cond:
        counts = dict(rec.counts)
        deliveries = rec.deliveries
        reconsumed = rec.reconsumed
        first = "%.2f" % (rec.first_at - started) if rec.first_at is not None else "-"
    missing = [i for i in range(args.count) if body_of(i) not in counts]
    unexpected = [b for b in counts if expected_index(b, args.count) is None]
    distinct = args.count - len(missing)
    dups = sum(c - 1 for c in counts.values())
    if missing:
        print("MISSING %d bodies: msg-{%s}" % (len(missing), ranges(missing)))
    if unexpected:
        print("UNEXPECTED bodies: %r" % unexpected[:20])
    ok = complete and not unexpected
    print("RESULT client=python mode=consume group=%s consume_from=%s expected=%d distinct=%d duplicates=%d "
          "deliveries=%d reconsumed=%d unexpected=%d first_msg_s=%s all_s=%.2f linger_s=%.1f shutdown_s=%.2f status=%s"
          % (args.group, cfw.split()[0], args.count, distinct, dups, deliveries, reconsumed, len(unexpected), first, all_s,
             args.linger if complete else 0.0, shutdown_s, "PASS" if ok else "FAIL"))
    return 0 if ok else 1


def consume_expect_none(args):
    rec = Recorder()
    started = time.monotonic()
    consumer, _ = start_consumer(args, rec)
    # Quiet window: any delivery is a failure, so stop waiting at the first one.
    rec.wait_until(lambda: rec.deliveries > 0, started + args.expect_none)
    with rec.cond:
        quiet_deliveries = rec.deliveries
    probe = "probe-%d-%d" % (os.getpid(), int(time.time() * 1000))
    probe_ok, probe_latency = False, None
    if quiet_deliveries == 0:
        producer = new_producer(args, args.group + "_probe_producer", instance="probe%d" % os.getpid())
        producer.start()
        sent_at = time.monotonic()
        try:
            r = producer.send_sync(make_message(args.topic, probe, "probe"))
            sent = r.status == SendStatus.OK
        except Exception as e:
            print("probe send failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
            sent = False
        finally:
            producer.shutdown()
        if sent:
            probe_ok = rec.wait_until(lambda: probe in rec.counts, sent_at + args.timeout)
            probe_latency = time.monotonic() - sent_at
    consumer.shutdown()
    with rec.cond:
        old = sorted(b for b in rec.counts if b != probe)
    if old:
        print("RECEIVED %d already-committed bodies, e.g. %r" % (len(old), old[:20]))
    ok = not old and probe_ok
    print("RESULT client=python mode=expect-none group=%s quiet_window_s=%.1f old_received=%d probe_received=%s "
          "probe_latency_s=%s status=%s"
          % (args.group, args.expect_none, len(old), "true" if probe_ok else "false",
             "%.2f" % probe_latency if probe_ok else "-", "PASS" if ok else "FAIL"))
    return 0 if ok else 1


def main(argv):
    args = parse_args(argv)
    try:
        if args.mode == "produce":
            return produce(args)
        if args.expect_none is None:
            return consume(args)
        return consume_expect_none(args)
    except Exception as e:
        print("RESULT client=python mode=%s status=ERROR error=%s: %s" % (args.mode, type(e).__name__, e))
        return 2


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # The package's __del__ hooks call into the C++ library again at interpreter exit;
    # leave without running them (everything was shut down explicitly above).
    os._exit(code)
