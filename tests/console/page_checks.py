"""Console checks of the issue's items, run by browser_test.py (which holds the shared helpers):
find by the producer's id, the API's JSON 404, the browse limit, whole-number lag ticks, times
with their zone, pages that refresh, skiff's store bytes, the reset's preselected topic, the
lag history's note; group create, change and delete; members with their clients and queues;
the producer and cluster pages; search by time across queues; and every page's layout at 1024
and 1440 px wide (with the screenshots).
"""

import datetime
import json
import re
import time
import urllib.parse

from browser_test import (GROUP, SECOND_BATCH, TICKER_GROUP, TICKER_TOPIC, TOPIC, Check, expect, q, short,
                          wait_for, error_body, now_ms)

# The zone the browser runs in (browser_test.Browser sets TZ): not UTC, so a time shown without
# its zone, or in the wrong one, is caught.
BROWSER_TZ = "Asia/Kolkata"
BROWSER_OFFSET = datetime.timedelta(hours=5, minutes=30)
ZONE_TEXT = "UTC+05:30"
WIDTHS = (1024, 1440)


def local_text(ms, with_ms=False):
    t = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone(BROWSER_OFFSET))
    base = t.strftime("%Y-%m-%d %H:%M:%S")
    if with_ms:
        base += ".%03d" % (t.microsecond // 1000)
    return "%s %s" % (base, ZONE_TEXT)


def api_unknown_route(api, admin):
    notes = []
    for method, path, want in (("GET", "/api/v1/no-such-route", 404), ("GET", "/api/v1/topics/%s/nothing" % TOPIC, 404),
                               ("POST", "/api/v1/overview", 405)):
        st, ctype, body = api.call(method, path, {} if method == "POST" else None)
        expect(st == want and "json" in ctype and error_body(body),
               "%s %s: %s %r %s, expected %d with a JSON error" % (method, path, st, ctype, short(body), want))
        notes.append("%s %s: %d %s" % (method, path, st, body["error"]))
    return "; ".join(notes)


def api_find_by_producer_id(api, admin, client, producer):
    body = '{"find": "by producer id", "at": %d}' % now_ms()
    r = client.send(producer, client.message(TOPIC, body, tags="find", keys="find-me"))
    # r.msg_id is what SendResult.getMsgId() answers: the client-made unique key.
    m = api.get("/api/v1/messages/" + q(r.msg_id))
    expect(m["uniq_key"] == r.msg_id and m["body_text"] == body and m["topic"] == TOPIC,
           "by the producer's id %s without a topic: %s" % (r.msg_id, short(m)))
    expect(m["msg_id"] != r.msg_id, "the answer's msg_id is the producer's id, not the offset id")
    # The offset id still finds it, and ?topic= still works.
    by_offset = api.get("/api/v1/messages/" + q(m["msg_id"]))
    expect(by_offset["uniq_key"] == r.msg_id, "by offset id %s: %s" % (m["msg_id"], short(by_offset)))
    in_topic = api.get("/api/v1/messages/%s?topic=%s" % (q(r.msg_id), TOPIC))
    expect(in_topic["msg_id"] == m["msg_id"], "with ?topic=: %s" % short(in_topic))
    theirs = admin.message(r.msg_id, TOPIC)
    expect(theirs["body"] == body, "skiff admin message: %r" % theirs["body"])
    st, _, err = api.call("GET", "/api/v1/messages/not-an-id")
    expect(st == 400 and error_body(err), "a non-hex id: %s %s" % (st, short(err)))
    return "producer's id %s found without a topic (offset id %s)" % (r.msg_id, m["msg_id"])


def ui_find_by_producer_id(b, client, producer):
    body = '{"find": "in the page", "at": %d}' % now_ms()
    r = client.send(producer, client.message(TOPIC, body, tags="find", keys="find-page"))
    b.open("#/messages")
    b.fill("#lookup-id", r.msg_id)
    b.el("#lookup-id-submit").click()
    wait_for(lambda: b.els("#message-body-text") and b.text("#message-body-text") == body, 10,
             "the message page for the producer's id %s (error: %r)" % (r.msg_id, b.error()))
    shown = b.el('#message-summary tr[data-key="uniq_key"] td').text
    expect(shown == r.msg_id, "unique key shown %r, producer's id %s" % (shown, r.msg_id))
    return "the form opened %s by the id the producer printed" % r.msg_id


def ui_browse_limit(b, api, admin):
    b.open("#/messages?topic=%s&queue=0&from=0&count=20" % TICKER_TOPIC)
    count = b.el("#browse-count")
    limit = int(count.get_attribute("max"))
    expect(limit == 200, "the count field allows up to %s" % limit)
    b.fill("#browse-count", str(limit + 1))
    expect(not b.js("return document.getElementById('browse-form').checkValidity()"), "the form takes %d" % (limit + 1))
    b.fill("#browse-count", str(limit))
    expect(b.js("return document.getElementById('browse-form').checkValidity()"), "the form refuses %d" % limit)
    # The API answers that many and no more: the ticker's topic has more than that stored.
    status = admin.topic_status(TICKER_TOPIC)
    qid = max(status, key=lambda k: status[k][1] - status[k][0])
    mn, mx = status[qid]
    page = api.get("/api/v1/messages?topic=%s&queue=%d&from=%d&count=1000" % (TICKER_TOPIC, qid, mn))
    want = min(limit, mx - mn)
    expect(len(page["messages"]) == want, "count=1000 listed %d, expected %d" % (len(page["messages"]), want))
    return "form and API both stop at %d (%d stored in queue %d)" % (limit, mx - mn, qid)


def ui_lag_ticks_and_history_note(b, api, admin):
    b.open("#/groups/" + GROUP)
    ticks = [t.text for t in b.els('#group-lag-chart text[data-axis="y"]')]
    expect(len(ticks) >= 2, "y ticks %s" % ticks)
    expect(all(re.fullmatch(r"\d+(k|M)?", t) for t in ticks), "lag ticks that are not whole numbers: %s" % ticks)
    g = api.get("/api/v1/groups/" + q(GROUP))
    note = b.el("#lag-history-note")
    expect("restart" in note.text and local_text(g["history_since_ms"]) in note.text,
           "the lag history's note %r (since %s)" % (note.text, g["history_since_ms"]))
    first = min([p["at_ms"] for p in g["lag_history"]] or [now_ms()])
    expect(g["history_since_ms"] <= first, "history_since_ms %s after the first sample %s" % (g["history_since_ms"], first))
    return "ticks %s; note %r" % (ticks, note.text)


def ui_times_carry_zone(b, api, admin):
    m = api.get("/api/v1/messages?topic=%s&key=order-3" % TOPIC)["messages"][0]
    b.open("#/messages/" + m["msg_id"])
    stored = b.el('#message-summary tr[data-key="stored"] td').text
    expect(stored == local_text(m["store_ms"], True), "stored shown %r, expected %r" % (stored, local_text(m["store_ms"], True)))
    b.open("#/messages?topic=%s&queue=%d&from=%d&count=1" % (TOPIC, m["queue_id"], m["queue_offset"]))
    row = b.rows("messages-table")[0]["text"]
    expect(local_text(m["born_ms"]) in row, "browse row %r has no %r" % (row, local_text(m["born_ms"])))
    b.open("#/groups/" + GROUP)
    label = b.js("return document.getElementById('reset-time').closest('label').innerText")
    expect(ZONE_TEXT in label, "reset time label %r" % label)
    return "message page %r, browse rows and the reset's field name %s" % (stored, ZONE_TEXT)


def open_live(b, route):
    """Opens a route with a 1 s refresh and marks the document, so a reload would show."""
    b.loads += 1
    b.d.get("%s/?refresh_ms=1000&load=%d%s" % (b.base, b.loads, route))
    wait_for(lambda: b.js("return document.getElementById('view').dataset.state") == "ready", 20, "%s to render" % route)
    b.js("window.__notReloaded = true")


def ui_pages_refresh(b, api, admin):
    checks = [
        ("#/topics", lambda: int(b.rows("topics-table") and [r for r in b.rows("topics-table") if r["topic"] == TOPIC][0]["messages"])),
        ("#/topics/" + TOPIC, lambda: int(b.el("#topic-messages").get_attribute("data-value"))),
        ("#/groups", lambda: int([r for r in b.rows("groups-table") if r["group"] == GROUP][0]["lag"])),
        ("#/groups/" + GROUP, lambda: int(b.el("#group-lag").get_attribute("data-value"))),
    ]
    notes = []
    for route, figure in checks:
        open_live(b, route)
        if route.startswith("#/groups/"):
            b.select("#reset-to", "latest")  # typed into a form: must survive the refresh
        before = figure()
        st, _, r = api.call("POST", "/api/v1/topics/%s/messages" % TOPIC, {"body": "refresh %s" % route})
        expect(st == 200, "send: %s %s" % (st, short(r)))
        after = wait_for(lambda: (lambda v: v if v > before else None)(figure()), 10, "%s to show the new message" % route)
        expect(b.js("return window.__notReloaded === true"), "%s reloaded the page instead of refreshing" % route)
        expect(not b.error(), "%s shows %r" % (route, b.error()))
        if route.startswith("#/groups/"):
            expect(b.el("#reset-to").get_attribute("value") == "latest", "the refresh reset the form")
        notes.append("%s %d -> %d" % (route, before, after))
    return "; ".join(notes)


def ui_overview_store_bytes(b, api, admin):
    b.open("#/")
    shown = int(b.el("#disk-store").get_attribute("data-value"))
    theirs = api.get("/api/v1/overview")["disk"]["store_bytes"]
    # The ticker keeps writing: the two readings are moments apart.
    expect(shown > 0 and abs(theirs - shown) <= max(1 << 20, theirs // 10), "store bytes shown %d, API %d" % (shown, theirs))
    text = b.text("#disk")
    expect("skiff's store" in text and b.text("#disk-store") in text, "disk card %r" % text)
    return "store %s (%d bytes) on the disk card" % (b.text("#disk-store"), shown)


def ui_reset_preselects_subscribed_topic(b, api, admin):
    notes = []
    for group, topic in ((TICKER_GROUP, TICKER_TOPIC), (GROUP, TOPIC)):
        b.open("#/groups/" + group)
        options = [o.get_attribute("value") for o in b.els("#reset-topic option")]
        chosen = b.el("#reset-topic").get_attribute("value")
        expect(chosen == topic, "%s: reset preselects %r of %s, expected %s" % (group, chosen, options, topic))
        notes.append("%s: %s of %s" % (group, chosen, options))
    return "; ".join(notes)


# ---- layout and screenshots ---------------------------------------------------------------------

LAYOUT_PROBE = """
const out = [];
const doc = document.documentElement;
if (doc.scrollWidth > window.innerWidth + 1) out.push('the page is ' + doc.scrollWidth + ' px wide in ' + window.innerWidth);
for (const el of document.querySelectorAll('#view .panel, #view .chart-box, #view .stat, #view .scroll, #view .scroll-x')) {
  if (el.scrollWidth > el.clientWidth + 1) {
    out.push((el.id || el.className) + ': content ' + el.scrollWidth + ' px in ' + el.clientWidth);
  }
}
for (const cell of document.querySelectorAll('#view td')) {
  const s = getComputedStyle(cell);
  if (cell.scrollWidth > cell.clientWidth + 1 && s.overflow === 'hidden') out.push('clipped cell: ' + cell.innerText.slice(0, 40));
}
const text = document.getElementById('view').innerText;
for (const word of ['null', 'undefined', 'NaN', '[object Object]']) {
  if (new RegExp('(^|\\\\W)' + word.replace(/[[\\]]/g, '\\\\$&') + '(\\\\W|$)').test(text)) out.push('stray text ' + word);
}
return out;
"""


def page_layout(b, api, admin, pages, shots):
    """Every page at each width: nothing wider than its card, no clipped cell, no stray text; a
    screenshot of each (the whole page) when asked."""
    problems, taken = [], []
    for width in WIDTHS:
        b.size(width, 900)
        for name, route in pages:
            b.open(route)
            if name == "topic":
                # The live tail with a row, to see its ids and keys at this width.
                st, _, r = api.call("POST", "/api/v1/topics/%s/messages" % TOPIC,
                                    {"body": "layout", "tag": "layoutTag", "keys": "layout-key-%d another-key" % width})
                expect(st == 200, "send: %s %s" % (st, short(r)))
                wait_for(lambda: b.rows("tail-list"), 10, "a row in the tail")
            for p in b.js(LAYOUT_PROBE):
                problems.append("%s at %d px: %s" % (name, width, p))
            if shots:
                taken.append(b.full_screenshot("console-%s-%d.png" % (name, width), width))
    b.size(1280, 900)
    expect(not problems, "; ".join(problems[:12]))
    return "%d pages at %s px fit%s" % (len(pages), "/".join(map(str, WIDTHS)), (", screenshots " + ", ".join(taken)) if taken else "")


# ---- groups, members, producers, cluster, time search ------------------------------------------

# Pages the layout check opens besides browser_test's own.
MORE_PAGES = [("producers", "#/producers"), ("cluster", "#/cluster"), ("ticker-group", "#/groups/" + TICKER_GROUP)]


def admin_group(admin, name):
    for g in admin.json("groups") or []:
        if g.get("group") == name:
            return g
    return None


def api_group_lifecycle(api, admin):
    name = "ConsoleApiGroup"
    st, _, body = api.call("POST", "/api/v1/groups", {"name": name, "retry_max_times": 3, "consume_orderly": True})
    expect(st == 201 and body.get("name") == name, "create: %s %s" % (st, short(body)))
    theirs = wait_for(lambda: admin_group(admin, name), 10, "%s in skiff admin groups" % name)
    expect(theirs["retry_max_times"] == 3 and theirs["consume_message_orderly"] is True and theirs["retry_queue_nums"] == 1,
           "skiff admin groups: %s" % theirs)
    st, _, body = api.call("POST", "/api/v1/groups", {"name": name})
    expect(st == 409 and error_body(body), "create again: %s %s" % (st, short(body)))
    for bad in ({"name": "bad name!"}, {"name": ""}, {"name": "G", "retry_max_times": -1}, {"name": "G", "colour": 1}):
        st, _, body = api.call("POST", "/api/v1/groups", bad)
        expect(st == 400 and error_body(body), "create %s: %s %s" % (bad, st, short(body)))
    st, _, body = api.call("PUT", "/api/v1/groups/" + name, {"retry_max_times": 7})
    expect(st == 200 and body["retry_max_times"] == 7 and body["consume_orderly"] is True, "change: %s %s" % (st, short(body)))
    wait_for(lambda: (admin_group(admin, name) or {}).get("retry_max_times") == 7, 10, "retry_max_times 7 in skiff admin")
    st, _, body = api.call("PUT", "/api/v1/groups/NoSuchGroupHere", {"retry_max_times": 7})
    expect(st == 404 and error_body(body), "change an unknown group: %s %s" % (st, short(body)))
    st, _, body = api.call("DELETE", "/api/v1/groups/" + name, header=False)
    expect(st == 403, "delete without the CSRF header: %s" % st)
    st, _, body = api.call("DELETE", "/api/v1/groups/%s?clean_offsets=true" % name)
    expect(st == 204, "delete: %s %s" % (st, short(body)))
    wait_for(lambda: admin_group(admin, name) is None, 10, "%s gone from skiff admin groups" % name)
    st, _, body = api.call("DELETE", "/api/v1/groups/" + name)
    expect(st == 404 and error_body(body), "delete again: %s %s" % (st, short(body)))
    return "201 (skiff admin: retry 3, orderly), 409, 400s, PUT retry 7 (skiff admin), 403 without header, 204, 404"


def ui_group_create_edit_delete(b, api, admin):
    name = "ConsoleUiGroup"
    b.open("#/groups")
    b.fill("#group-create-name", name)
    b.fill("#group-create-retry-max", "4")
    b.el("#group-create-submit").click()
    wait_for(lambda: any(r["group"] == name for r in b.rows("groups-table")), 10, "%s in the table" % name)
    theirs = wait_for(lambda: admin_group(admin, name), 10, "%s in skiff admin groups" % name)
    expect(theirs["retry_max_times"] == 4, "skiff admin: %s" % theirs)
    b.open("#/groups/" + name)
    b.fill("#group-edit-retry-max", "9")
    b.el("#group-edit-orderly").click()
    b.el("#group-edit-submit").click()
    wait_for(lambda: name in b.notice(), 10, "the saved notice")
    theirs = wait_for(lambda: (lambda g: g if g and g["retry_max_times"] == 9 else None)(admin_group(admin, name)), 10,
                      "retry 9 in skiff admin")
    expect(theirs["consume_message_orderly"] is True, "orderly not saved: %s" % theirs)
    b.el("#group-delete").click()
    text = b.alert(accept=False)
    expect(name in text, "confirm %r" % text)
    time.sleep(1)
    expect(admin_group(admin, name) is not None, "a dismissed dialog deleted %s" % name)
    b.el("#group-delete").click()
    b.alert(accept=True)
    wait_for(lambda: admin_group(admin, name) is None, 10, "%s gone from skiff admin groups" % name)
    wait_for(lambda: b.js("return location.hash") == "#/groups", 10, "back on the groups page")
    return "created with retry 4, changed to 9 and orderly, deleted after a dismissed dialog, as skiff admin groups shows"


def ui_group_members(b, api, admin):
    theirs = admin.json("connections", TICKER_GROUP)
    conns = {c["client_id"]: c for c in theirs["connections"]}
    b.open("#/groups/" + TICKER_GROUP)
    rows = b.rows("group-members")
    expect({r["client"] for r in rows} == set(conns), "members %s, skiff admin connections %s" % ([r["client"] for r in rows], sorted(conns)))
    status = admin.topic_status(TICKER_TOPIC)
    for r in rows:
        c = conns[r["client"]]
        expect(r["address"] == c["client_addr"] and r["language"] == c["language"], "member %s: %s, admin %s" % (r["client"], r, c))
        expect(r["version"] not in ("", "–") and r["protocol"] == "remoting", "member %s version/protocol %s" % (r["client"], r))
        held = set(r["queues"].split())
        want = {"%s:%d" % (TICKER_TOPIC, qid) for qid in status}
        # One member of a clustering group holds every queue of what it subscribes to.
        expect(want <= held, "member %s holds %s, expected all of %s" % (r["client"], sorted(held), sorted(want)))
    return "%d member(s) with address, language, version as skiff admin connections; queues %s" % (
        len(rows), [r["queues"] for r in rows])


def ui_producers(b, api, admin):
    # A C++ producer registers with its heartbeat, every 30 s once it knows a route: the ticker's
    # has sent since the start, so one period is as long as this waits.
    wait_for(lambda: any(p["group"] == "ConsoleTickerProducer" for p in api.get("/api/v1/producers")["producers"]),
             45, "the ticker's producer among the API's producers", interval=1)
    b.open("#/producers")
    rows = b.rows("producers-table")
    listed = api.get("/api/v1/producers")["producers"]
    mine = sorted((r["group"], r["client"], r["address"], r["language"], r["protocol"]) for r in rows)
    theirs = sorted((p["group"], p["client_id"], p["address"], p["language"], p["protocol"]) for p in listed)
    expect(mine == theirs, "page %s, API %s" % (mine, theirs))
    ticker = [r for r in rows if r["group"] == "ConsoleTickerProducer"][0]
    expect(ticker["language"] == "CPP" and re.fullmatch(r"127\.0\.0\.1:\d+", ticker["address"]) and ticker["version"] not in ("", "–"),
           "ticker producer %s" % ticker)
    return "%d producers in %s, as the API lists them" % (len(rows), sorted({r["group"] for r in rows}))


def ui_cluster(b, api, admin):
    b.open("#/cluster")
    c = api.get("/api/v1/cluster")
    theirs = admin.json("cluster")
    expect(c["broker_name"] in json.dumps(theirs) and c["cluster_name"] in json.dumps(theirs),
           "cluster %s/%s, skiff admin cluster %s" % (c["cluster_name"], c["broker_name"], short(theirs)))
    shown = {r["key"]: r["value"] for r in b.rows("cluster-settings-table")}
    expect(shown.get("metrics_listen") == c["settings"]["metrics_listen"] and "listen" in shown and "data_dir" in shown,
           "settings shown %s" % short(shown))
    expect(shown.get("acl") == "(set; not shown)" and "secret" not in json.dumps(c["settings"]["acl"] if "acl" in c["settings"] else ""),
           "the acl setting %r" % shown.get("acl"))
    expect(b.el('#cluster-summary tr[data-key="broker_name"] td').text == c["broker_name"], "broker name shown")
    return "%s in %s; %d settings, acl hidden" % (c["broker_name"], c["cluster_name"], len(shown))


def ui_time_search(b, api, admin):
    every = []
    for qid, (mn, mx) in admin.topic_status(TOPIC).items():
        every += api.get("/api/v1/messages?topic=%s&queue=%d&from=%d&count=200" % (TOPIC, qid, mn))["messages"]
    times = sorted(m["store_ms"] for m in every)
    begin, end = times[5], times[25]
    # The form takes seconds: the range is whole seconds from begin's to end's.
    begin_s, end_s = begin // 1000 * 1000, end // 1000 * 1000 + 999
    # Oldest first; messages stored in the same millisecond by queue, then offset.
    want = sorted((m["store_ms"], m["queue_id"], m["queue_offset"], m["msg_id"]) for m in every
                  if begin_s <= m["store_ms"] <= end_s)
    want_queues = {m["queue_id"] for m in every if begin_s <= m["store_ms"] <= end_s}
    b.open("#/messages")
    b.select("#time-topic", TOPIC)
    fmt = lambda ms: datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone(BROWSER_OFFSET)).strftime("%Y-%m-%dT%H:%M:%S")
    for css, ms in (("#time-begin", begin_s), ("#time-end", end_s)):
        b.js("arguments[0].value = arguments[1]", b.el(css), fmt(ms))
    b.el("#time-submit").click()
    rows = wait_for(lambda: "begin_ms" in b.js("return location.hash") and b.rows("messages-table"), 10, "results by time")
    got = [r["msgId"] for r in rows]
    ids = [w[-1] for w in want]
    expect(got == ids, "by time: %d rows %s, expected %d %s" % (len(got), got, len(ids), ids))
    page = api.get("/api/v1/messages?topic=%s&begin_ms=%d&end_ms=%d" % (TOPIC, begin_s, end_s))
    expect([m["msg_id"] for m in page["messages"]] == got and page["more"] is False, "API by time %s" % short(page))
    st, _, err = api.call("GET", "/api/v1/messages?topic=%s&begin_ms=%d&end_ms=%d" % (TOPIC, end_s, begin_s))
    expect(st == 400 and error_body(err), "a reversed range: %s %s" % (st, short(err)))
    return "%d messages from %d queues between %s and %s, oldest first" % (len(got), len(want_queues), fmt(begin_s), fmt(end_s))


# ---- users (ACL 2.0), last: the first user turns ACL on until the last one is deleted --------------

def users_api(api, credentials):
    """GET /api/v1/users signed in as credentials (user, password)."""
    import base64
    import urllib.request
    token = base64.b64encode(("%s:%s" % credentials).encode()).decode()
    request = urllib.request.Request(api.base + "/api/v1/users", headers={"Authorization": "Basic " + token})
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read().decode())


def users_delete(api, name, credentials):
    """DELETE /api/v1/users/NAME signed in as credentials; errors ignored (a cleanup)."""
    import base64
    import urllib.request
    token = base64.b64encode(("%s:%s" % credentials).encode()).decode()
    request = urllib.request.Request(api.base + "/api/v1/users/" + urllib.parse.quote(name), method="DELETE",
                                     headers={"Authorization": "Basic " + token, "X-Skiff-Console": "1"})
    try:
        urllib.request.urlopen(request, timeout=10).read()
    except Exception:
        pass


def click_live(b, css):
    """Clicks what css finds, found again if the page drew itself anew meanwhile (after each
    change the page reloads its view, and its tables are redrawn at every refresh)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    for _ in range(25):
        try:
            b.el(css).click()
            return
        except (NoSuchElementException, StaleElementReferenceException):
            time.sleep(0.2)
    raise Check("%s: not found, or replaced at every try, for 5 s" % css)


def ui_users(b, api, admin, shots):
    """The users page: ACL off at first; the first user, a super user, turns it on (the browser
    then signs in as it); a normal user and its policy entries made with the forms show in the
    tables as the API lists them, a password never; disabling, removing an entry and deleting
    (after a dismissed then an accepted confirmation) change what the API lists; deleting the last
    user turns ACL off again."""
    import base64
    b.open("#/users")
    expect("ACL off" in b.text("#users-acl"), "ACL state: %r" % b.text("#users-acl"))
    # Sign every later request in as the super user made next (ignored while ACL is off).
    b.d.execute_cdp_cmd("Network.enable", {})
    token = base64.b64encode(b"ops:ops-password-1").decode()
    b.d.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": "Basic " + token}})
    taken = []
    try:
        b.fill("#user-create-name", "orders-app")
        b.fill("#user-create-password", "orders-secret-1")
        b.el("#user-create-submit").click()
        wait_for(lambda: "must be a Super user" in b.error(), 10, "the first user refused unless super")
        b.fill("#user-create-name", "ops")
        b.fill("#user-create-password", "ops-password-1")
        b.el("#user-create-super").click()
        b.el("#user-create-submit").click()
        wait_for(lambda: "ops" in b.notice(), 10, "ops created")
        expect("ACL on" in b.text("#users-acl"), "ACL state after the first user: %r" % b.text("#users-acl"))
        b.fill("#user-create-name", "orders-app")
        b.fill("#user-create-password", "orders-secret-1")
        b.el("#user-create-submit").click()
        wait_for(lambda: "orders-app" in b.notice(), 10, "orders-app created")
        b.select("#acl-set-user", "orders-app")
        b.fill("#acl-set-resources", "Topic:orders, Group:GID_orders")
        b.fill("#acl-set-actions", "Pub,Sub")
        b.el("#acl-set-submit").click()
        wait_for(lambda: "orders-app" in b.notice(), 10, "the allow entries set")
        b.select("#acl-set-user", "orders-app")
        b.fill("#acl-set-resources", "Topic:orders-audit*")
        b.fill("#acl-set-actions", "All")
        b.select("#acl-set-decision", "Deny")
        b.fill("#acl-set-ips", "10.0.0.0/8")
        b.el("#acl-set-submit").click()
        wait_for(lambda: len(b.rows("acl-table")) == 3, 10, "three entries in the table")
        listed = users_api(api, ("ops", "ops-password-1"))
        shown = {(r["user"], r["resource"], r["decision"]) for r in b.rows("acl-table")}
        theirs = {(e["user"], e["resource"], e["decision"]) for e in listed["entries"]}
        expect(shown == theirs, "table %s, API %s" % (sorted(shown), sorted(theirs)))
        expect({r["user"] for r in b.rows("users-table")} == {"ops", "orders-app"}, "users %s" % b.rows("users-table"))
        page = b.js("return document.body.innerText")
        expect("orders-secret-1" not in page and "ops-password-1" not in page and "password" not in json.dumps(listed),
               "a password is shown")
        for p in b.js(LAYOUT_PROBE):
            raise Check("users page layout: %s" % p)
        if shots:
            for width in WIDTHS:
                taken.append(b.full_screenshot("console-users-%d.png" % width, width))
            b.size(1280, 900)
        # Disable, then remove the deny entry, then delete the user: each as the API then lists it.
        click_live(b, '#users-table tr[data-user="orders-app"] button[data-action="toggle"]')
        wait_for(lambda: any(u["name"] == "orders-app" and u["status"] == "disable"
                             for u in users_api(api, ("ops", "ops-password-1"))["users"]), 10, "orders-app disabled")
        click_live(b, '#acl-table tr[data-resource="Topic:orders-audit*"] button[data-action="delete"]')
        b.alert(accept=True)
        wait_for(lambda: len(users_api(api, ("ops", "ops-password-1"))["entries"]) == 2, 10, "the deny entry removed")
        click_live(b, '#users-table tr[data-user="orders-app"] button[data-action="delete"]')
        text = b.alert(accept=False)
        expect("orders-app" in text, "confirm %r" % text)
        time.sleep(0.5)
        expect(any(u["name"] == "orders-app" for u in users_api(api, ("ops", "ops-password-1"))["users"]),
               "a dismissed dialog deleted orders-app")
        click_live(b, '#users-table tr[data-user="orders-app"] button[data-action="delete"]')
        b.alert(accept=True)
        wait_for(lambda: not users_api(api, ("ops", "ops-password-1"))["entries"], 10, "orders-app and its entries gone")
        click_live(b, '#users-table tr[data-user="ops"] button[data-action="delete"]')
        b.alert(accept=True)
        wait_for(lambda: "ACL off" in b.text("#users-acl"), 10, "ACL off again once the last user is deleted")
    finally:
        b.d.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
        # Whatever failed above, the users go (the last one with ACL), so the suite goes on.
        for name in ("orders-app", "ops"):
            users_delete(api, name, ("ops", "ops-password-1"))
    st, _, body = api.call("GET", "/api/v1/users")
    expect(st == 200 and body["acl_on"] is False and body["users"] == [], "after: %s %s" % (st, short(body)))
    return "first user refused unless super; ops (super) and orders-app made, 3 entries as the API lists, no password shown; " \
        "disabled, an entry removed, deleted after a dismissed dialog; ACL off again%s" % (
            (", screenshots " + ", ".join(taken)) if taken else "")


LITE_PARENT = "ConsoleChats"


def ui_lite_topics(b, api, admin, shots):
    """A LITE parent's page lists its lite topics a page of 50 at a time, by name, as the API and
    `skiff admin lite` list them: Next reaches the last page and is then disabled, Previous comes
    back; each row's message count is what was sent to that lite topic."""
    st, _, body = api.call("POST", "/api/v1/topics", {"name": LITE_PARENT, "queues": 1, "message_type": "LITE"})
    expect(st == 201, "create %s: %s %s" % (LITE_PARENT, st, short(body)))
    sent = {}
    for i in range(60):
        lite = "session-%03d" % i
        for n in range(1 + i % 3):
            st, _, r = api.call("POST", "/api/v1/topics/%s/messages" % LITE_PARENT,
                                {"body": "%s-%d" % (lite, n), "properties": {"__LITE_TOPIC": lite}})
            expect(st == 200, "send to %s: %s %s" % (lite, st, short(r)))
        sent[lite] = 1 + i % 3
    page = api.get("/api/v1/topics/%s/lite?limit=50" % LITE_PARENT)
    expect(page["total"] == 60 and len(page["lite_topics"]) == 50 and page["next_after"] == "session-049",
           "API first page: total %s, %d rows, next %s" % (page["total"], len(page["lite_topics"]), page["next_after"]))
    theirs = admin.json("lite", LITE_PARENT, "--after", "session-049")
    expect(theirs and [t["lite_topic"] for t in theirs[0]["lite_topics"]] == ["session-%03d" % i for i in range(50, 60)],
           "skiff admin lite --after session-049: %s" % short(theirs))
    b.open("#/topics/" + LITE_PARENT)
    wait_for(lambda: len(b.rows("lite-topics")) == 50, 10, "the first 50 lite topics")
    rows = b.rows("lite-topics")
    expect([r["lite"] for r in rows] == ["session-%03d" % i for i in range(50)], "first page %s" % [r["lite"] for r in rows[:3]])
    expect(all(int(r["messages"]) == sent[r["lite"]] for r in rows), "counts %s" % [(r["lite"], r["messages"]) for r in rows[:5]])
    expect(b.text("#lite-summary") == "1–50 of 60", "summary %r" % b.text("#lite-summary"))
    expect(b.js("return document.getElementById('lite-prev').disabled"), "Previous enabled on the first page")
    for p in b.js(LAYOUT_PROBE):
        raise Check("lite topics page layout: %s" % p)
    taken = []
    if shots:
        taken.append(b.full_screenshot("console-lite-1440.png", 1440))
        b.size(1280, 900)
    b.el("#lite-next").click()
    wait_for(lambda: [r["lite"] for r in b.rows("lite-topics")] == ["session-%03d" % i for i in range(50, 60)], 10,
             "the last 10 lite topics after Next")
    expect(b.text("#lite-summary") == "51–60 of 60", "summary %r" % b.text("#lite-summary"))
    expect(b.js("return document.getElementById('lite-next').disabled"), "Next enabled on the last page")
    b.el("#lite-prev").click()
    wait_for(lambda: len(b.rows("lite-topics")) == 50, 10, "the first page again after Previous")
    st, _, err = api.call("GET", "/api/v1/topics/%s/lite" % TOPIC)
    expect(st == 400 and "not a LITE topic" in err.get("error", ""), "a plain topic's lite list: %s %s" % (st, short(err)))
    return "60 lite topics in pages of 50 and 10 as the API and skiff admin list them; Next, Previous; a plain topic refused%s" % (
        (", screenshot " + ", ".join(taken)) if taken else "")
