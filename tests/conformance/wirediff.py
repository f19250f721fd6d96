#!/usr/bin/env python3
"""Compare the wire logs of two conformance runs (CONFORMANCE_WIRE_LOG=1, WORK/harness.err).

  wirediff.py APACHE_WORK/harness.err SKIFF_WORK/harness.err

Pairs each response with its request by opaque and counts the shapes
(request code, response code, remark with numbers and ids blurred, response header names).
Prints every shape with both counts, and marks shapes seen against only one broker with `<<`.
"""

import collections
import re
import sys

LINE = re.compile(r'WIRE (\S+) (->|<-) (\S+) code=(-?\d+) flag=(\d+) opaque=(\d+)( remark=(.*?))? ext=\{(.*)\} body=(\d+)')


def shapes(path):
    requests, out = {}, collections.Counter()
    for line in open(path, errors="replace"):
        m = LINE.match(line)
        if not m:
            continue
        _scenario, direction, _addr, code, _flag, opaque, _r, remark, ext, _body = m.groups()
        keys = tuple(sorted(set(re.findall(r'(?:^|, )([A-Za-z_#]+)=', ext))))
        if direction == "->":
            requests[opaque] = code
        else:
            blurred = re.sub(r'[0-9A-Fa-f_]{6,}|\d+', 'N', remark or '')[:80]
            out[(int(requests.get(opaque, -1)), int(code), blurred, keys)] += 1
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = shapes(sys.argv[1]), shapes(sys.argv[2])
    print("%-6s %-6s  %s" % ("first", "second", "(request code, response code, remark, response header names)"))
    for k in sorted(set(a) | set(b)):
        mark = "  <<" if (k in a) != (k in b) else ""
        print("%-6d %-6d  %s%s" % (a.get(k, 0), b.get(k, 0), k, mark))


if __name__ == "__main__":
    main()
