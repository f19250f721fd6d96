#!/usr/bin/env python3
"""Conformance scenario in raw remoting frames: what makes a send request a batch?

  raw_batch_flag.py --namesrv 127.0.0.1:PORT

A Java broker decides batch-or-single by the header's `batch` field (V1 name) / `m` (V2 name),
parsed with Boolean.parseBoolean, whatever the request code; SEND_BATCH_MESSAGE (320) only
selects the V2 header. Old rocketmq-client-cpp releases send a batch as SEND_MESSAGE (10) with
`batch: "1"`, later ones as SEND_MESSAGE_V2 (310) with `m: "1"`; a fixed one sends "true".

For each case below this sends a three-record MessageBatch body (MessageDecoder.encodeMessages
layout) to queue 0 of a new topic, then asks GET_MAX_OFFSET (30) how many entries queue 0 got:
3 means the broker unpacked the batch, 1 means it stored the body as one message. The expected
numbers are what Apache RocketMQ does, except one deliberate difference (skiff's README and
docs/wire-protocol.md §9): skiff reads "1" as true, as it reads every boolean, so the C++ client's
batches arrive as the three messages it sent. With `--broker skiff` those two cases expect 3.
Prints one PASS/FAIL line for `raw_batch_flag`.
"""

import argparse
import json
import re
import socket
import struct
import sys
import time
import uuid

NAME = "raw_batch_flag"
# (label, request code, header field name style, batch value or None,
#  expected entries on Apache, expected entries on skiff)
CASES = [
    ("code 320, m=true (Java client)", 320, "v2", "true", 3, 3),
    ("code 10, batch=true", 10, "v1", "true", 3, 3),
    ("code 310, m=true (rocketmq-client-cpp after #334)", 310, "v2", "true", 3, 3),
    ("code 10, batch=1 (rocketmq-client-cpp <= 1.2.4)", 10, "v1", "1", 1, 3),
    ("code 310, m=1 (rocketmq-client-cpp 1.2.5-2.2.0)", 310, "v2", "1", 1, 3),
    ("code 320 without m", 320, "v2", None, 1, 1),
]
_opaque = [100]


def call(addr, code, ext, body=b"", timeout=5.0):
    host, port = addr.rsplit(":", 1)
    if not host.startswith("127."):
        raise ValueError("loopback only: %s" % addr)
    _opaque[0] += 1
    header = {"code": code, "language": "JAVA", "version": 479, "opaque": _opaque[0], "flag": 0,
              "extFields": ext, "serializeTypeCurrentRPC": "JSON"}
    h = json.dumps(header).encode()
    frame = struct.pack(">ii", 4 + len(h) + len(body), len(h)) + h + body
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(frame)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by %s" % addr)
            buf += chunk
    total, ori = struct.unpack(">ii", buf[:8])
    hlen = ori & 0xFFFFFF
    return json.loads(buf[8:8 + hlen].decode()), buf[8 + hlen:4 + total]


def props(d):
    return "".join("%s\x01%s\x02" % kv for kv in d.items())


def batch_body(n, run):
    out = b""
    for i in range(n):
        body = ("raw-batch-%d" % i).encode()
        p = props({"TAGS": "Tag%d" % i, "UNIQ_KEY": (uuid.uuid4().hex.upper()), "WAIT": "true"}).encode()
        rec = struct.pack(">iiiii", 0, 0, 0, 0, len(body)) + body + struct.pack(">h", len(p)) + p
        rec = struct.pack(">i", len(rec)) + rec[4:]
        out += rec
    return out


def broker_of(namesrv, topic):
    rh, body = call(namesrv, 105, {"topic": topic})
    if rh.get("code") != 0:
        return None
    route = json.loads(re.sub(r'([{,])(\d+):', r'\1"\2":', body.decode()))
    return route["brokerDatas"][0]["brokerAddrs"]["0"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--broker", choices=["skiff", "apache"], required=True)
    a = ap.parse_args()
    t0 = time.monotonic()
    run = uuid.uuid4().hex[:8]
    broker = broker_of(a.namesrv, "TBW102")
    failures, seen, sent = [], [], []
    for i, (label, code, style, value, want_apache, want_skiff) in enumerate(CASES):
        want = want_skiff if a.broker == "skiff" else want_apache
        topic = "cf_raw_batch_%d_%s" % (i, run)
        now = str(int(time.time() * 1000))
        if style == "v1":
            ext = {"producerGroup": "cf_raw_pg_" + run, "topic": topic, "defaultTopic": "TBW102",
                   "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": now,
                   "flag": "0", "properties": props({"WAIT": "true"}), "reconsumeTimes": "0",
                   "unitMode": "false", "batch": value}
        else:
            ext = {"a": "cf_raw_pg_" + run, "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": now,
                   "h": "0", "i": props({"WAIT": "true"}), "j": "0", "k": "false", "m": value}
        if value is None:
            ext.pop("m", None)
            ext.pop("batch", None)
        try:
            rh, _ = call(broker, code, ext, batch_body(3, run))
        except (OSError, ValueError) as e:
            failures.append("%s: %s" % (label, e))
            continue
        if rh.get("code") != 0:
            seen.append("%s: send answered %s %s" % (label, rh.get("code"), rh.get("remark")))
            failures.append("%s: send answered code %s (%s)" % (label, rh.get("code"), rh.get("remark")))
            continue
        ids = (rh.get("extFields") or {}).get("msgId", "")
        sent.append((label, topic, want, len([x for x in ids.split(",") if x])))
    for label, topic, want, nids in sent:
        # A Java broker builds its consume queue asynchronously: poll until the count is reached
        # or a deadline passes (an unexpected count is then reported as observed).
        deadline = time.monotonic() + 5.0
        while True:
            try:
                mh, _ = call(broker, 30, {"topic": topic, "queueId": "0"})
            except (OSError, ValueError) as e:
                got = "error %s" % e
                break
            got = int((mh.get("extFields") or {}).get("offset", -1)) if mh.get("code") == 0 else None
            if got == want or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        seen.append("%s: %s entries, %d msgId(s)" % (label, got, nids))
        if got != want:
            failures.append("%s: expected %d stored entries, observed %s" % (label, want, got))
    secs = time.monotonic() - t0
    if failures:
        print("FAIL %s (%.1fs): %s || observed: %s" % (NAME, secs, " | ".join(failures), "; ".join(seen)))
        return 1
    print("PASS %s (%.1fs): %s" % (NAME, secs, "; ".join(seen)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
