#!/usr/bin/env python3
"""Logging TCP proxy for RocketMQ remoting frames (diagnostics for tests/interop).

  frame_proxy.py --listen 127.0.0.1:PORT --upstream 127.0.0.1:SKIFF_PORT [--log FILE] [--body-bytes N]

Forwards bytes unchanged in both directions and logs every frame it sees:
direction, connection id, time, code, flag (request/response/oneway), opaque, language, version,
remark, extFields, body length and a body preview (JSON bodies as text).

Routes name the broker address, so for broker traffic to pass through the proxy too, start skiff
advertising the proxy's address (SKIFF_ADVERTISED_ADDRESS=127.0.0.1:PROXY_PORT); run.sh does
this when INTEROP_PROXY=1. Frames are never modified. Only loopback addresses are accepted.
"""

import argparse
import asyncio
import json
import struct
import sys
import time

LANG = {0: "JAVA", 1: "CPP", 2: "DOTNET", 3: "PYTHON", 4: "DELPHI", 5: "ERLANG", 6: "RUBY", 7: "OTHER",
        8: "HTTP", 9: "GO", 10: "PHP", 11: "OMS", 12: "RUST", 13: "NODE_JS"}
MAX_FRAME = 16 * 1024 * 1024 + 64


def decode_binary_header(h):
    code, lang, version, opaque, flag = struct.unpack_from(">hBhii", h, 0)
    pos = 13
    (rlen,) = struct.unpack_from(">i", h, pos)
    pos += 4
    remark = h[pos:pos + rlen].decode("utf-8", "replace") if rlen > 0 else None
    pos += max(rlen, 0)
    (elen,) = struct.unpack_from(">i", h, pos)
    pos += 4
    ext, end = {}, pos + elen
    while pos < end:
        (kl,) = struct.unpack_from(">h", h, pos)
        pos += 2
        k = h[pos:pos + kl].decode("utf-8", "replace")
        pos += kl
        (vl,) = struct.unpack_from(">i", h, pos)
        pos += 4
        ext[k] = h[pos:pos + vl].decode("utf-8", "replace")
        pos += vl
    return {"code": code, "language": LANG.get(lang, lang), "version": version, "opaque": opaque,
            "flag": flag, "remark": remark, "extFields": ext}


def describe(frame, body_bytes):
    """frame = bytes after the 4-byte length."""
    (ori,) = struct.unpack_from(">i", frame, 0)
    ser, hlen = (ori >> 24) & 0xFF, ori & 0xFFFFFF
    if hlen > len(frame) - 4:
        return "BAD FRAME: header length %d > frame %d" % (hlen, len(frame) - 4)
    header, body = frame[4:4 + hlen], frame[4 + hlen:]
    raw_header = None
    try:
        if ser == 0:
            raw_header = header.decode("utf-8", "replace")
            h = json.loads(raw_header)
        else:
            h = decode_binary_header(header)
    except Exception as e:  # keep proxying even if a header is odd
        return "serType=%d UNDECODABLE HEADER (%s): %r" % (ser, e, header[:300])
    flag = h.get("flag", 0) or 0
    kind = "RESP" if flag & 1 else ("ONEWAY" if flag & 2 else "REQ")
    parts = ["%s code=%s opaque=%s flag=%s ser=%s lang=%s ver=%s" % (
        kind, h.get("code"), h.get("opaque"), flag, "JSON" if ser == 0 else "ROCKETMQ",
        h.get("language"), h.get("version"))]
    if h.get("remark") is not None:
        parts.append("remark=%r" % h.get("remark"))
    if "extFields" in h:
        parts.append("ext=%s" % json.dumps(h.get("extFields"), sort_keys=True))
    extra = {k: v for k, v in h.items()
             if k not in ("code", "opaque", "flag", "language", "version", "remark", "extFields")}
    if extra:
        parts.append("other=%s" % json.dumps(extra, sort_keys=True))
    parts.append("body=%dB" % len(body))
    if body and body_bytes:
        preview = body[:body_bytes]
        if preview[:1] in (b"{", b"["):
            parts.append("json=%s" % preview.decode("utf-8", "replace"))
        else:
            parts.append("hex=%s" % preview.hex())
    if ser == 0 and raw_header is not None and "serializeTypeCurrentRPC" not in raw_header:
        parts.append("(no serializeTypeCurrentRPC)")
    return " ".join(parts)


class Logger(object):
    def __init__(self, path):
        self.out = open(path, "a", buffering=1) if path else sys.stdout
        self.t0 = time.monotonic()

    def log(self, line):
        self.out.write("%9.3f %s\n" % (time.monotonic() - self.t0, line))


async def pump(reader, writer, tag, logger, body_bytes):
    buf = b""
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
            buf += chunk
            while len(buf) >= 4:
                (n,) = struct.unpack_from(">i", buf, 0)
                if n < 4 or n > MAX_FRAME:
                    logger.log("%s BAD LENGTH %d; stop decoding this direction" % (tag, n))
                    buf = b""
                    body_bytes = None
                    break
                if len(buf) < 4 + n:
                    break
                frame, buf = buf[4:4 + n], buf[4 + n:]
                logger.log("%s %s" % (tag, describe(frame, body_bytes)))
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        logger.log("%s EOF%s" % (tag, " (%d undecoded bytes)" % len(buf) if buf else ""))
        try:
            writer.close()
        except Exception:
            pass


def split_addr(s):
    host, _, port = s.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
        raise SystemExit("only loopback addresses: %s" % s)
    return host.strip("[]"), int(port)


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True)
    p.add_argument("--upstream", required=True)
    p.add_argument("--log")
    p.add_argument("--body-bytes", type=int, default=400)
    a = p.parse_args()
    lhost, lport = split_addr(a.listen)
    uhost, uport = split_addr(a.upstream)
    logger = Logger(a.log)
    counter = [0]

    async def handle(creader, cwriter):
        counter[0] += 1
        cid = counter[0]
        peer = cwriter.get_extra_info("peername")
        try:
            ureader, uwriter = await asyncio.open_connection(uhost, uport)
        except OSError as e:
            logger.log("c%d connect upstream failed: %s" % (cid, e))
            cwriter.close()
            return
        logger.log("c%d OPEN from %s" % (cid, peer))
        await asyncio.gather(pump(creader, uwriter, "c%d >>" % cid, logger, a.body_bytes),
                             pump(ureader, cwriter, "c%d <<" % cid, logger, a.body_bytes))

    server = await asyncio.start_server(handle, lhost, lport)
    logger.log("proxy %s -> %s" % (a.listen, a.upstream))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
