#!/usr/bin/env python3
"""The console's cost with many topics and groups: fills a running `skiff serve` with N topics
(5 messages each, through the console API) and N groups with an offset (over remoting), then
times the API (urllib, median of 7) and the pages in headless Chromium (navigation to first
rendered content, median of 7).

    target/release/skiff serve --listen 127.0.0.1:19876 --grpc-listen off \\
        --metrics-listen 127.0.0.1:15557 --data-dir /tmp/console-load &
    python3 bench/console_load.py --remoting 127.0.0.1:19876 --http http://127.0.0.1:15557

Needs Selenium (PyPI) and Debian's chromium + chromium-driver for the page timings.
"""
import argparse
import json
import socket
import statistics
import struct
import time
import urllib.request


class Remoting:
    """Just enough of the remoting protocol (JSON headers) to create groups and commit offsets."""

    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.opaque = 0

    def call(self, code, ext, body=b""):
        self.opaque += 1
        header = json.dumps({"code": code, "language": "PYTHON", "version": 413,
                             "opaque": self.opaque, "flag": 0, "extFields": ext}).encode()
        self.sock.sendall(struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body)
        length = struct.unpack(">I", self._read(4))[0]
        frame = self._read(length)
        header_len = struct.unpack(">I", frame[:4])[0] & 0xFFFFFF
        return json.loads(frame[4:4 + header_len])

    def _read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError("the broker closed the connection")
            data += chunk
        return data


def post(http, path, body):
    request = urllib.request.Request(http + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "X-Skiff-Console": "1"})
    return urllib.request.urlopen(request).read()


def fill(http, remoting, n):
    r = Remoting(remoting)
    for i in range(n):
        topic = "Load%03d" % i
        post(http, "/api/v1/topics", {"name": topic, "queues": 4})
        for j in range(5):
            post(http, "/api/v1/topics/%s/messages" % topic, {"body": "m%d" % j})
        group = "GID_load%03d" % i
        answer = r.call(200, {}, json.dumps({"groupName": group, "consumeEnable": True,
                                             "retryMaxTimes": 16, "retryQueueNums": 1}).encode())
        assert answer["code"] == 0, answer
        answer = r.call(15, {"consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": "1"})
        assert answer["code"] == 0, answer


def api_times(http):
    for path in ["/", "/api/v1/overview", "/api/v1/topics", "/api/v1/groups"]:
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            urllib.request.urlopen(http + path).read()
            times.append((time.perf_counter() - t0) * 1000)
        print("GET %-18s median %.2f ms (7 requests)" % (path, statistics.median(times)))


def page_times(http):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    options = webdriver.ChromeOptions()
    for a in ["--headless=new", "--no-sandbox", "--window-size=1280,900", "--disable-gpu"]:
        options.add_argument(a)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        for page, ready in [("#/", ".stat-value"), ("#/topics", "table tbody tr"), ("#/groups", "table tbody tr")]:
            times = []
            for _ in range(7):
                driver.get("about:blank")
                t0 = time.perf_counter()
                driver.get(http + "/" + page)
                deadline = t0 + 10
                while not driver.find_elements(By.CSS_SELECTOR, ready):
                    if time.perf_counter() > deadline:
                        raise TimeoutError("%s did not render" % page)
                    time.sleep(0.002)
                times.append((time.perf_counter() - t0) * 1000)
            print("page %-10s median %.1f ms to first content (7 loads)" % (page, statistics.median(times)))
    finally:
        driver.quit()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--remoting", required=True)
    p.add_argument("--http", required=True)
    p.add_argument("--count", type=int, default=100, help="topics and groups (default 100)")
    a = p.parse_args()
    fill(a.http, a.remoting, a.count)
    api_times(a.http)
    page_times(a.http)


if __name__ == "__main__":
    main()
