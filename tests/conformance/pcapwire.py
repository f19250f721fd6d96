#!/usr/bin/env python3
"""Remoting commands from a packet capture, as WIRE lines (the Java harness's wire-log format).

  pcapwire.py WORK/wire.pcap [--language GO|JAVA|CPP|...] [--scenario NAME]

run.sh writes WORK/wire.pcap when CONFORMANCE_CAPTURE=1 (tcpdump on the loopback interface for
the whole run): the way to see the Go client's traffic, which has no hook for a wire log. Each
TCP connection is reassembled, cut into RocketMQ remoting frames (JSON or ROCKETMQ header
serialization) and printed one command a line:

  WIRE <scenario> -> <server addr> code=.. flag=.. opaque=.. remark=.. ext={..} body=N

`->` is a request from the client (the side that opened the connection) and `<-` the server's
response; requests the server sends to a client (NOTIFY_CONSUMER_IDS_CHANGED 40, ...) print as
`<~` and the client's answers as `~>`. A connection's scenario is the first `cf_<scenario>_...`
topic or group name it carries (every scenario's names have that form), else `?`; its
language is the `language` field of the client's first request. Opaques are made unique per
connection (connection number * 10^7 + opaque) so that wirediff.py pairs responses with the
right requests:

  pcapwire.py A/wire.pcap --language GO > A/go-wire.log
  pcapwire.py B/wire.pcap --language GO > B/go-wire.log
  wirediff.py A/go-wire.log B/go-wire.log
"""

import argparse
import json
import re
import struct
import sys

NAME = re.compile(r'cf_([a-z0-9_]+?)_(?:t|cg|pg|tpg|reader)\d+_[0-9a-z]+')
LANGS = {0: "JAVA", 1: "CPP", 2: "DOTNET", 3: "PYTHON", 4: "DELPHI", 5: "ERLANG", 6: "RUBY", 7: "OTHER",
         8: "HTTP", 9: "GO", 10: "PHP", 11: "OMS", 12: "RUST"}


def packets(path):
    """(src, sport, dst, dport, flags, seq, payload) of each TCP packet over IPv4/IPv6."""
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        sys.exit("not a pcap file (pcapng is not read; use tcpdump -w)")
    linktype = struct.unpack(end + "I", data[20:24])[0]
    pos = 24
    while pos + 16 <= len(data):
        _ts, _tu, incl, _orig = struct.unpack(end + "IIII", data[pos:pos + 16])
        pkt = data[pos + 16:pos + 16 + incl]
        pos += 16 + incl
        if linktype == 1:  # Ethernet (tcpdump -i lo)
            proto, ip = struct.unpack(">H", pkt[12:14])[0], pkt[14:]
        elif linktype == 113:  # Linux cooked v1 (-i any)
            proto, ip = struct.unpack(">H", pkt[14:16])[0], pkt[16:]
        elif linktype == 276:  # Linux cooked v2
            proto, ip = struct.unpack(">H", pkt[0:2])[0], pkt[20:]
        elif linktype in (0, 108):  # BSD loopback
            ip = pkt[4:]
            proto = 0x0800 if ip[0] >> 4 == 4 else 0x86DD
        elif linktype == 101:  # raw IP
            ip = pkt
            proto = 0x0800 if ip[0] >> 4 == 4 else 0x86DD
        else:
            sys.exit("unsupported link type %d" % linktype)
        if proto == 0x0800:
            ihl = (ip[0] & 15) * 4
            if ip[9] != 6:
                continue
            total = struct.unpack(">H", ip[2:4])[0]
            src, dst = ".".join(map(str, ip[12:16])), ".".join(map(str, ip[16:20]))
            tcp = ip[ihl:total]
        elif proto == 0x86DD:
            if ip[6] != 6:
                continue
            plen = struct.unpack(">H", ip[4:6])[0]
            src, dst = "[%s]" % ip[8:24].hex(), "[%s]" % ip[24:40].hex()
            tcp = ip[40:40 + plen]
        else:
            continue
        sport, dport, seq = struct.unpack(">HHI", tcp[:8])
        off = (tcp[12] >> 4) * 4
        flags = tcp[13]
        yield src, sport, dst, dport, flags, seq, tcp[off:]


class Half:
    """One direction of a connection: in-order bytes, and the frames cut from them."""

    def __init__(self):
        self.next = None
        self.pending = {}
        self.buf = bytearray()

    def add(self, seq, payload, syn):
        if syn:
            self.next = (seq + 1) & 0xFFFFFFFF
            return
        if not payload:
            return
        if self.next is None:
            self.next = seq
        self.pending[seq] = payload
        while True:
            progressed = False
            for s in list(self.pending):
                p = self.pending[s]
                rel = (s - self.next) & 0xFFFFFFFF
                if rel == 0 or rel > 0x80000000:  # at or before the expected byte
                    skip = 0 if rel == 0 else (0x100000000 - rel)
                    del self.pending[s]
                    if skip < len(p):
                        self.buf += p[skip:]
                        self.next = (self.next + len(p) - skip) & 0xFFFFFFFF
                    progressed = True
            if not progressed:
                return

    def frames(self):
        while len(self.buf) >= 8:
            length = struct.unpack(">I", self.buf[:4])[0]
            if len(self.buf) < 4 + length:
                return
            frame = bytes(self.buf[4:4 + length])
            del self.buf[:4 + length]
            yield decode(frame)


def decode(frame):
    word = struct.unpack(">I", frame[:4])[0]
    kind, hlen = word >> 24, word & 0xFFFFFF
    header = frame[4:4 + hlen]
    body = len(frame) - 4 - hlen
    if kind == 0:
        h = json.loads(header.decode("utf-8", "replace"))
        return {"code": h.get("code", 0), "flag": h.get("flag", 0), "opaque": h.get("opaque", 0),
                "remark": h.get("remark"), "ext": h.get("extFields") or {}, "language": str(h.get("language")),
                "body": body}
    code, lang, _ver, opaque, flag = struct.unpack(">hBhii", header[:13])
    p = 13
    rlen = struct.unpack(">i", header[p:p + 4])[0]
    p += 4
    remark = header[p:p + rlen].decode("utf-8", "replace") if rlen > 0 else None
    p += max(rlen, 0)
    elen = struct.unpack(">i", header[p:p + 4])[0]
    p += 4
    ext, end = {}, p + max(elen, 0)
    while p < end:
        kl = struct.unpack(">h", header[p:p + 2])[0]
        k = header[p + 2:p + 2 + kl].decode("utf-8", "replace")
        p += 2 + kl
        vl = struct.unpack(">i", header[p:p + 4])[0]
        v = header[p + 4:p + 4 + vl].decode("utf-8", "replace")
        p += 4 + vl
        ext[k] = v
    return {"code": code, "flag": flag, "opaque": opaque, "remark": remark, "ext": ext,
            "language": LANGS.get(lang, str(lang)), "body": body}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pcap")
    ap.add_argument("--language", help="only connections whose client speaks this language (GO, JAVA, CPP)")
    ap.add_argument("--scenario", help="only connections of this scenario")
    args = ap.parse_args()

    conns = {}  # (client, server) -> state
    order = []
    for src, sport, dst, dport, flags, seq, payload in packets(args.pcap):
        a, b = "%s:%d" % (src, sport), "%s:%d" % (dst, dport)
        syn, ack = flags & 2, flags & 16
        key = (a, b) if (a, b) in conns else (b, a) if (b, a) in conns else None
        if key is None:
            # The client opened the connection (SYN without ACK); else guess the sender is it.
            key = (b, a) if (syn and ack) else (a, b)
            conns[key] = {"n": len(conns) + 1, "up": Half(), "down": Half(), "frames": [],
                          "scenario": None, "language": None}
            order.append(key)
        c = conns[key]
        up = (a, b) == key
        half = c["up"] if up else c["down"]
        half.add(seq, payload, syn)
        for fr in half.frames():
            c["frames"].append((up, fr))
            if up and c["language"] is None and not fr["flag"] & 1:
                c["language"] = fr["language"]
            if c["scenario"] is None:
                m = NAME.search(" ".join(map(str, fr["ext"].values())))
                if m:
                    c["scenario"] = m.group(1)

    for key in order:
        c = conns[key]
        scen = c["scenario"] or "?"
        if args.language and c["language"] != args.language:
            continue
        if args.scenario and scen != args.scenario:
            continue
        for up, fr in c["frames"]:
            response = fr["flag"] & 1
            if up:
                arrow = "~>" if response else "->"
            else:
                arrow = "<-" if response else "<~"
            ext = ", ".join("%s=%s" % (k, fr["ext"][k]) for k in sorted(fr["ext"]))
            remark = "" if fr["remark"] is None else " remark=" + str(fr["remark"])
            line = "WIRE %s %s %s code=%d flag=%d opaque=%d%s ext={%s} body=%d" % (
                scen, arrow, key[1], fr["code"], fr["flag"], c["n"] * 10_000_000 + fr["opaque"], remark, ext, fr["body"])
            print(line.replace("\x01", "\\1").replace("\x02", "\\2").replace("\n", "\\n"))


if __name__ == "__main__":
    main()
