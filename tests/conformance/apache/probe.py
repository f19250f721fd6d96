#!/usr/bin/env python3
"""Readiness probe for a RocketMQ name server + brokers, speaking raw remoting frames.

  probe.py --namesrv 127.0.0.1:PORT --brokers broker-a[,broker-b]|any [--timeout SECS] [--pids PID,...]
           [--no-broker-check]

Ready means: the name server answers GET_ROUTEINFO_BY_TOPIC (105) for TBW102 (registered by
every broker with autoCreateTopicEnable=true) with a route naming every expected broker, and
each broker's master address answers GET_BROKER_RUNTIME_INFO (28) with SUCCESS. Polls every
0.5 s until --timeout. `--brokers any` accepts a route with any one broker;
--no-broker-check skips the code-28 request (for brokers that do not answer it); exits 0 when ready, 1 on timeout, 2 when one of --pids died. Loopback
addresses only. Prints the broker addresses it found.
"""

import argparse
import json
import os
import re
import socket
import struct
import sys
import time

VERSION = 479  # MQVersion V5_3_3: the name server answers standard JSON to >= 401


def request(addr, code, ext=None, timeout=3.0):
    host, port = addr.rsplit(":", 1)
    if not (host.startswith("127.") or host == "localhost"):
        raise ValueError("refusing non-loopback address %s" % addr)
    header = {"code": code, "language": "JAVA", "version": VERSION, "opaque": 1, "flag": 0,
              "serializeTypeCurrentRPC": "JSON"}
    if ext:
        header["extFields"] = ext
    h = json.dumps(header).encode()
    frame = struct.pack(">ii", 4 + len(h), len(h)) + h
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(frame)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
    total, ori = struct.unpack(">ii", buf[:8])
    hlen = ori & 0xFFFFFF
    rh = json.loads(buf[8:8 + hlen].decode())
    body = buf[8 + hlen:4 + total]
    return rh, body


def route_brokers(namesrv):
    rh, body = request(namesrv, 105, {"topic": "TBW102"})
    if rh.get("code") != 0:
        return {}
    text = body.decode("utf-8", "replace")
    # fastjson may write numeric map keys unquoted; quote them before parsing.
    text = re.sub(r'([{,])(\d+):', r'\1"\2":', text)
    route = json.loads(text)
    found = {}
    for b in route.get("brokerDatas", []):
        master = (b.get("brokerAddrs") or {}).get("0")
        if master:
            found[b["brokerName"]] = master
    return found


def alive(pids):
    for p in pids:
        try:
            os.kill(p, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--pids", default="")
    ap.add_argument("--no-broker-check", action="store_true")
    a = ap.parse_args()
    want = [b for b in a.brokers.split(",") if b]
    pids = [int(p) for p in a.pids.split(",") if p]
    deadline = time.time() + a.timeout
    last = "no answer yet"
    while time.time() < deadline:
        if pids and not alive(pids):
            print("probe: a JVM exited before the brokers were ready (%s)" % last, file=sys.stderr)
            return 2
        try:
            found = route_brokers(a.namesrv)
            if want == ["any"]:
                want = sorted(found)[:1] or ["any"]
            missing = [b for b in want if b not in found]
            if missing:
                last = "route of TBW102 lacks %s" % ",".join(missing)
            else:
                bad = []
                for b in ([] if a.no_broker_check else want):
                    rh, _ = request(found[b], 28)
                    if rh.get("code") != 0:
                        bad.append("%s answered %s" % (b, rh.get("code")))
                if not bad:
                    for b in want:
                        print("%s=%s" % (b, found[b]))
                    return 0
                last = "; ".join(bad)
        except (OSError, ValueError, ConnectionError) as e:
            last = "%s: %s" % (type(e).__name__, e)
        time.sleep(0.5)
    print("probe: not ready after %.0fs (%s)" % (a.timeout, last), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
