package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// The scenarios. Each one is written once and must pass against Apache RocketMQ.
func scenarios() []def {
	return []def{
		{"go_send_sync", 60 * time.Second, sendSync},
		{"go_send_async", 60 * time.Second, sendAsync},
		{"go_send_oneway", 60 * time.Second, sendOneway},
		{"go_send_batch", 60 * time.Second, sendBatch},
		{"go_orderly", 90 * time.Second, orderly},
		{"go_push_tag_filter", 60 * time.Second, pushTagFilter},
		{"go_retry_reconsume", 90 * time.Second, retryReconsume},
		{"go_from_first_offset", 60 * time.Second, fromFirstOffset},
		{"go_restart_resumes", 90 * time.Second, restartResumes},
		{"go_rebalance_two_consumers", 150 * time.Second, rebalanceTwo},
		{"go_broadcasting", 60 * time.Second, broadcasting},
		{"go_delay_levels", 60 * time.Second, delayLevels},
	}
}

// sample is n messages with tags TagA/TagB/TagC, two keys, and user properties (one non-ASCII).
func sample(topic, prefix string, n int) []*primitive.Message {
	tags := []string{"TagA", "TagB", "TagC"}
	var out []*primitive.Message
	for i := 0; i < n; i++ {
		color := "blue"
		if i%2 == 0 {
			color = "red"
		}
		out = append(out, msg(topic, tags[i%3], []string{fmt.Sprintf("%s-key%d", prefix, i), "shared-key"},
			fmt.Sprintf("%s-%d", prefix, i), props("color", color, "seq", strconv.Itoa(i), "unicode", "\u00e9t\u00e9")))
	}
	return out
}

// verify compares what was sent with what was delivered, matched by body: count, topic, tags,
// keys, user properties and (with send results) queue id, queue offset, msgId and offsetMsgId.
func verify(c *Ctx, topic string, sent []*primitive.Message, results []*primitive.SendResult, got []*primitive.MessageExt) {
	c.Eq("number of messages delivered", len(sent), len(got))
	byBody := map[string]*primitive.MessageExt{}
	for _, g := range got {
		if _, dup := byBody[string(g.Body)]; dup {
			c.Fail("delivered twice: " + string(g.Body))
		}
		byBody[string(g.Body)] = g
	}
	for i, s := range sent {
		body := string(s.Body)
		g := byBody[body]
		if !c.Check(g != nil, "message %s not delivered", body) {
			continue
		}
		c.Eq(body+" topic", topic, g.Topic)
		c.Eq(body+" tags", s.GetTags(), g.GetTags())
		c.Eq(body+" keys", s.GetKeys(), g.GetKeys())
		c.Eq(body+" user properties", userProps(s), userProps(&g.Message))
		c.Eq(body+" reconsumeTimes", int32(0), g.ReconsumeTimes)
		if results != nil && results[i] != nil {
			r := results[i]
			c.Eq(body+" queue id", r.MessageQueue.QueueId, g.Queue.QueueId)
			c.Eq(body+" queue offset", r.QueueOffset, g.QueueOffset)
			c.Eq(body+" msgId (UNIQ_KEY)", r.MsgID, g.MsgId)
			c.Eq(body+" offsetMsgId", r.OffsetMsgID, g.OffsetMsgId)
		}
	}
}

// consumeAll starts a new group on topic and collects deliveries until n distinct bodies (or
// the timeout), then 1.5 s more for duplicates.
func consumeAll(c *Ctx, topic string, n int, timeout time.Duration) []*primitive.MessageExt {
	got := &collector{}
	pc := newPush(c, c.Name("cg"))
	if err := pc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, got.listener("c")); err != nil {
		c.Fail(fmt.Sprintf("subscribe: %v", err))
		return nil
	}
	if err := pc.Start(); err != nil {
		c.Fail(fmt.Sprintf("start push consumer: %v", err))
		return nil
	}
	got.awaitDistinct(n, timeout)
	time.Sleep(1500 * time.Millisecond)
	var out []*primitive.MessageExt
	for _, r := range got.snapshot() {
		out = append(out, r.msg)
	}
	return out
}

// ---- sends ---------------------------------------------------------------------------------

func sendSync(c *Ctx) {
	topic := c.Name("t")
	p := newProducer(c)
	sent := sample(topic, "sync", 4)
	var results []*primitive.SendResult
	var where []string
	for _, m := range sent {
		r := send(c, p, m)
		results = append(results, r)
		if r != nil {
			where = append(where, fmt.Sprintf("%d@%d", r.MessageQueue.QueueId, r.QueueOffset))
		}
	}
	c.Note("sent to %v", where)
	verify(c, topic, sent, results, consumeAll(c, topic, len(sent), 20*time.Second))
}

// sendAsync: six SendAsync calls; every callback runs with SEND_OK, and the messages read back
// (PULL_MESSAGE from offset 0) are stored as sent, where the results say.
func sendAsync(c *Ctx) {
	topic := c.Name("t")
	p := newProducer(c)
	send(c, p, msg(topic, "Warm", nil, "async-warm", nil)) // creates the topic
	sent := sample(topic, "async", 6)
	results := make([]*primitive.SendResult, len(sent))
	errs := make([]error, len(sent))
	var wg sync.WaitGroup
	for i, m := range sent {
		wg.Add(1)
		i := i
		err := p.SendAsync(context.Background(), func(_ context.Context, r *primitive.SendResult, err error) {
			defer wg.Done()
			results[i], errs[i] = r, err
		}, m)
		if err != nil {
			wg.Done()
			errs[i] = err
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		c.Fail("not every async callback ran within 20 s")
		return
	}
	for i := range sent {
		if !c.Check(errs[i] == nil, "async send %d failed: %v", i, errs[i]) {
			results[i] = nil
		} else if results[i] != nil {
			c.Eq(fmt.Sprintf("async send %d status", i), primitive.SendOK, results[i].Status)
		}
	}
	var got []*primitive.MessageExt
	for _, g := range readAll(c, topic, len(sent)+1, 15*time.Second) {
		if string(g.Body) != "async-warm" {
			got = append(got, g)
		}
	}
	verify(c, topic, sent, results, got)
}

// sendOneway: four SendOneWay calls, read back as sent.
func sendOneway(c *Ctx) {
	topic := c.Name("t")
	p := newProducer(c)
	send(c, p, msg(topic, "Warm", nil, "oneway-warm", nil)) // creates the topic
	sent := sample(topic, "oneway", 4)
	for _, m := range sent {
		if err := p.SendOneWay(context.Background(), m); err != nil {
			c.Fail(fmt.Sprintf("oneway send of %s: %v", bodyOf(m), err))
		}
	}
	var got []*primitive.MessageExt
	for _, g := range readAll(c, topic, len(sent)+1, 15*time.Second) {
		if string(g.Body) != "oneway-warm" {
			got = append(got, g)
		}
	}
	verify(c, topic, sent, nil, got)
}

// sendBatch: SendSync with three messages is one SEND_BATCH_MESSAGE (320); the three are stored
// in one queue at consecutive offsets, and the result's offsetMsgId lists the three stored ids.
// The Go client gives the batch's messages no UNIQ_KEY, so the result's msgId is empty and each
// delivered message's msgId is its offsetMsgId.
func sendBatch(c *Ctx) {
	topic := c.Name("t")
	p := newProducer(c)
	send(c, p, msg(topic, "Warm", nil, "batch-warm", nil)) // creates the topic
	sent := sample(topic, "batch", 3)
	r := send(c, p, sent...)
	if r == nil {
		return
	}
	offsetIDs := strings.Split(r.OffsetMsgID, ",")
	c.Note("batch result queue %d@%d, msgId %q, %d offsetMsgIds", r.MessageQueue.QueueId, r.QueueOffset, r.MsgID, len(offsetIDs))
	c.Eq("number of offsetMsgIds in the batch send result", 3, len(offsetIDs))
	all := consumeAll(c, topic, 4, 20*time.Second)
	var got []*primitive.MessageExt
	for _, g := range all {
		if string(g.Body) != "batch-warm" {
			got = append(got, g)
		}
	}
	verify(c, topic, sent, nil, got)
	sort.Slice(got, func(i, j int) bool { return got[i].QueueOffset < got[j].QueueOffset })
	for i, g := range got {
		if i >= 3 {
			break
		}
		c.Eq(fmt.Sprintf("batch message %d body", i), fmt.Sprintf("batch-%d", i), string(g.Body))
		c.Eq(fmt.Sprintf("batch message %d queue", i), r.MessageQueue.QueueId, g.Queue.QueueId)
		c.Eq(fmt.Sprintf("batch message %d offset", i), r.QueueOffset+int64(i), g.QueueOffset)
		if i < len(offsetIDs) {
			c.Eq(fmt.Sprintf("batch message %d offsetMsgId", i), offsetIDs[i], g.OffsetMsgId)
		}
		c.Eq(fmt.Sprintf("batch message %d UNIQ_KEY", i), "", g.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex))
		c.Eq(fmt.Sprintf("batch message %d msgId", i), g.OffsetMsgId, g.MsgId)
	}
}

// keySelector sends a message to queue (orderKey % number of queues).
type keySelector struct{}

func (keySelector) Select(m *primitive.Message, mqs []*primitive.MessageQueue, _ string) *primitive.MessageQueue {
	k, _ := strconv.Atoi(m.GetProperty("orderKey"))
	return mqs[k%len(mqs)]
}

// orderly: a queue selector by key, then an orderly push consumer (LOCK_BATCH_MQ, one queue at
// a time): each key's messages in one queue, delivered in send order.
func orderly(c *Ctx) {
	topic := c.Name("t")
	p := newProducer(c, producer.WithQueueSelector(keySelector{}))
	send(c, p, msg(topic, "Warm", nil, "warm", props("orderKey", "0"))) // creates the topic
	mqs, err := queuesOf(c, topic)
	if !c.Check(err == nil && len(mqs) > 0, "queues of %s: %v", topic, err) {
		return
	}
	nq := len(mqs)
	sentToQueue := map[int][]string{0: {"warm"}} // in send order
	queueOfKey := map[int]int{}
	wantQueue := map[int]int{}
	nextOffset := map[int]int64{0: 1} // queue 0 has the warm-up message
	for i := 0; i < 24; i++ {
		key := i % 4
		body := fmt.Sprintf("k%d-%d", key, i/4)
		r := send(c, p, msg(topic, "Ord", []string{fmt.Sprintf("k%d", key)}, body, props("orderKey", strconv.Itoa(key))))
		if r == nil {
			return
		}
		if q, ok := queueOfKey[key]; ok && q != r.MessageQueue.QueueId {
			c.Fail(fmt.Sprintf("key %d changed queue: %d then %d", key, q, r.MessageQueue.QueueId))
		}
		queueOfKey[key] = r.MessageQueue.QueueId
		wantQueue[key] = key % nq
		c.Eq(fmt.Sprintf("queue offset of %s", body), nextOffset[key%nq], r.QueueOffset)
		nextOffset[key%nq]++
		sentToQueue[r.MessageQueue.QueueId] = append(sentToQueue[r.MessageQueue.QueueId], body)
	}
	c.Note("%d queues; queue of key %v", nq, queueOfKey)
	c.Eq("queue ids chosen by key % queues", wantQueue, queueOfKey)

	var mu sync.Mutex
	perQueue := map[int][]string{}
	total := 0
	pc := newPush(c, c.Name("cg"), consumer.WithConsumerOrder(true))
	err = pc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				perQueue[m.Queue.QueueId] = append(perQueue[m.Queue.QueueId], string(m.Body))
				total++
			}
			return consumer.ConsumeSuccess, nil
		})
	if err == nil {
		err = pc.Start()
	}
	if !c.Check(err == nil, "start orderly consumer: %v", err) {
		return
	}
	await(40*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return total >= 25 })
	time.Sleep(1500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	c.Eq("per-queue delivery order", sentToQueue, perQueue)
	c.Eq("deliveries", 25, total)
}

// ---- push consumers ------------------------------------------------------------------------

func pushTagFilter(c *Ctx) {
	topic := c.Name("t")
	p := newProducer(c)
	var sent []*primitive.Message
	for i, tag := range []string{"TagA", "TagB", "TagC", "TagAB", "TagA"} {
		sent = append(sent, msg(topic, tag, nil, fmt.Sprintf("tags-%d-%s", i, tag), props("tag", tag)))
	}
	sent = append(sent, msg(topic, "", nil, "tags-none", nil)) // no tag at all
	for _, m := range sent {
		send(c, p, m)
	}
	got := &collector{}
	pc := newPush(c, c.Name("cg"))
	err := pc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "TagA || TagB"}, got.listener("c"))
	if err == nil {
		err = pc.Start()
	}
	if !c.Check(err == nil, "start push consumer: %v", err) {
		return
	}
	want := []string{"tags-0-TagA", "tags-1-TagB", "tags-4-TagA"}
	got.awaitDistinct(len(want), 20*time.Second)
	time.Sleep(2 * time.Second) // anything unwanted would arrive by now
	c.Eq("bodies delivered for 'TagA || TagB'", want, sortedSet(got.bodies()))
	c.Eq("deliveries (no duplicates)", len(want), len(got.snapshot()))
	for _, r := range got.snapshot() {
		c.Eq("tag property of "+r.body(), r.msg.GetTags(), r.msg.GetProperty("tag"))
	}
}

// retryReconsume: RECONSUME_LATER with delay level 1 and maxReconsumeTimes 2. The client sends
// each failed message back (CONSUMER_SEND_MSG_BACK 36); the broker redelivers it through
// %RETRY%group 1 s later with reconsumeTimes 1, then 2, and the third failure lands it in
// %DLQ%group.
func retryReconsume(c *Ctx) {
	topic := c.Name("t")
	group := c.Name("cg")
	p := newProducer(c)
	send(c, p, msg(topic, "Warm", nil, "warm", nil)) // creates the topic
	got := &collector{}
	pc := newPush(c, group, consumer.WithMaxReconsumeTimes(2))
	err := pc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			if string(msgs[0].Body) == "warm" {
				return consumer.ConsumeSuccess, nil
			}
			got.add("c", msgs...)
			if cc, ok := primitive.GetConcurrentlyCtx(ctx); ok {
				cc.DelayLevelWhenNextConsume = 1 // 1 s instead of the default 10 s, 30 s
			}
			return consumer.ConsumeRetryLater, nil
		})
	if err == nil {
		err = pc.Start()
	}
	if !c.Check(err == nil, "start push consumer: %v", err) {
		return
	}
	t0 := time.Now()
	awaitRetryQueue(c, pc, group)
	c.Note("pulling %%RETRY%%group %.1fs after start", time.Since(t0).Seconds())
	sr := send(c, p, msg(topic, "Fail", []string{"retry-key"}, "retry-body", props("attempt", "any")))
	if sr == nil {
		return
	}
	await(40*time.Second, func() bool { return len(got.snapshot()) >= 3 })
	dlq := readAll(c, "%DLQ%"+group, 1, 20*time.Second)
	time.Sleep(2500 * time.Millisecond) // a fourth delivery would come ~1 s after the third
	all := got.snapshot()
	var times []int32
	for _, r := range all {
		times = append(times, r.msg.ReconsumeTimes)
	}
	c.Note("deliveries reconsumeTimes %v", times)
	c.Eq("reconsumeTimes of the deliveries", []int32{0, 1, 2}, times)
	for i, r := range all {
		d := fmt.Sprintf("delivery %d ", i)
		c.Eq(d+"topic", topic, r.msg.Topic)
		c.Eq(d+"body", "retry-body", r.body())
		c.Eq(d+"tags", "Fail", r.msg.GetTags())
		c.Eq(d+"keys", "retry-key", r.msg.GetKeys())
		c.Eq(d+"user properties", props("attempt", "any"), userProps(&r.msg.Message))
		c.Eq(d+"msgId", sr.MsgID, r.msg.MsgId)
		if i > 0 {
			gap := r.at.Sub(all[i-1].at)
			c.Check(gap >= 700*time.Millisecond, "delivery %d came %d ms after the previous one (delay level 1 = 1 s)", i, gap.Milliseconds())
		}
	}
	if c.Eq("messages in %DLQ%"+group, 1, len(dlq)) {
		d := dlq[0]
		c.Eq("DLQ topic", "%DLQ%"+group, d.Topic)
		c.Eq("DLQ body", "retry-body", string(d.Body))
		c.Eq("DLQ tags", "Fail", d.GetTags())
		c.Eq("DLQ keys", "retry-key", d.GetKeys())
		c.Eq("DLQ user properties", props("attempt", "any"), userProps(&d.Message))
		c.Eq("DLQ RETRY_TOPIC property", topic, d.GetProperty(primitive.PropertyRetryTopic))
		c.Eq("DLQ msgId (UNIQ_KEY kept)", sr.MsgID, d.MsgId)
		c.Eq("DLQ reconsumeTimes", int32(3), d.ReconsumeTimes)
	}
}

// fromFirstOffset: a new group on a topic that already has messages, then more messages.
func fromFirstOffset(c *Ctx) {
	topic := c.Name("t")
	p := newProducer(c)
	for i := 0; i < 4; i++ {
		send(c, p, msg(topic, "Pre", nil, fmt.Sprintf("pre-%d", i), nil))
	}
	got := &collector{}
	pc := newPush(c, c.Name("cg"))
	err := pc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, got.listener("c"))
	if err == nil {
		err = pc.Start()
	}
	if !c.Check(err == nil, "start push consumer: %v", err) {
		return
	}
	await(15*time.Second, func() bool { return len(assigned(pc, topic)) > 0 })
	time.Sleep(1500 * time.Millisecond)
	for i := 0; i < 2; i++ {
		send(c, p, msg(topic, "Post", nil, fmt.Sprintf("post-%d", i), nil))
	}
	got.awaitDistinct(6, 15*time.Second)
	time.Sleep(1500 * time.Millisecond)
	want := []string{"post-0", "post-1", "pre-0", "pre-1", "pre-2", "pre-3"}
	c.Eq("bodies delivered to a new group (CONSUME_FROM_FIRST_OFFSET)", want, sortedSet(got.bodies()))
	c.Eq("deliveries (no duplicates)", len(want), len(got.snapshot()))
}

// restartResumes: a group consumes 10 and shuts down (committing its offsets); a new consumer
// of the group gets exactly the 5 sent since.
func restartResumes(c *Ctx) {
	topic := c.Name("t")
	group := c.Name("cg")
	p := newProducer(c)
	for i := 0; i < 10; i++ {
		send(c, p, msg(topic, "R", nil, fmt.Sprintf("first-%d", i), nil))
	}
	one := &collector{}
	c1 := newPush(c, group)
	err := c1.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, one.listener("c1"))
	if err == nil {
		err = c1.Start()
	}
	if !c.Check(err == nil, "start first consumer: %v", err) {
		return
	}
	c.Check(one.awaitDistinct(10, 20*time.Second), "first consumer got %d/10", len(one.distinct()))
	mqs, err := queuesOf(c, topic)
	if !c.Check(err == nil && len(mqs) > 0, "queues of %s: %v", topic, err) {
		return
	}
	// The sum of the group's committed offsets over the topic's queues.
	committed := func() int64 {
		sum := int64(0)
		for _, mq := range mqs {
			offset, err := committedOffset(p, group, mq)
			if err != nil {
				c.Note("query offset of queue %d: %v", mq.QueueId, err)
			}
			if offset > 0 {
				sum += offset
			}
		}
		return sum
	}
	// The consumer commits every 5 s; its shutdown commits once more, oneway, and a connection
	// closed right after may drop that (seen against Apache: 8 of 10). What the broker is tested
	// for is keeping the commits and a new consumer resuming from them, so the first consumer
	// stops once the broker holds all ten.
	before := int64(0)
	c.Check(await(15*time.Second, func() bool { before = committed(); return before == 10 }),
		"offsets committed before the shutdown: %d of 10 within 15 s", before)
	_ = c1.Shutdown()
	after := committed()
	c.Check(after == 10, "offsets committed after the shutdown: %d of 10", after)
	for i := 0; i < 5; i++ {
		send(c, p, msg(topic, "R", nil, fmt.Sprintf("second-%d", i), nil))
	}
	two := &collector{}
	c2 := newPush(c, group)
	err = c2.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, two.listener("c2"))
	if err == nil {
		err = c2.Start()
	}
	if !c.Check(err == nil, "start second consumer: %v", err) {
		return
	}
	two.awaitDistinct(5, 20*time.Second)
	time.Sleep(3 * time.Second)
	c.Eq("first run deliveries", 10, len(one.snapshot()))
	c.Eq("bodies delivered after the restart", []string{"second-0", "second-1", "second-2", "second-3", "second-4"}, sortedSet(two.bodies()))
	c.Eq("deliveries after the restart", 5, len(two.snapshot()))
}

// rebalanceTwo: two consumers of a group split the queues, each message goes to its queue's
// owner; one shuts down, the other takes every queue and nothing is delivered twice.
func rebalanceTwo(c *Ctx) {
	topic := c.Name("t")
	group := c.Name("cg")
	p := newProducer(c)
	send(c, p, msg(topic, "RB", nil, "warm-0", nil)) // creates the topic
	mqs, err := queuesOf(c, topic)
	if !c.Check(err == nil && len(mqs) > 0, "queues of %s: %v", topic, err) {
		return
	}
	nq := len(mqs)
	got := &collector{}
	a := newPush(c, group)
	b := newPush(c, group)
	for _, x := range []struct {
		pc  pushConsumer
		who string
	}{{a, "A"}, {b, "B"}} {
		err := x.pc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, got.listener(x.who))
		if err == nil {
			err = x.pc.Start()
		}
		if !c.Check(err == nil, "start consumer %s: %v", x.who, err) {
			return
		}
	}
	// Each change of the group's members makes the broker notify both clients, and each notice
	// rebalances anew: in the first seconds several arrive. Once, on a loaded machine against
	// Apache, the split changed after it was first seen, and A and B both consumed the messages
	// of B's queues. The split is taken once it has held for 2 s.
	split := awaitSteady(45*time.Second, 2*time.Second, func() bool {
		qa, qb := assigned(a, topic), assigned(b, topic)
		return len(qa) > 0 && len(qb) > 0 && len(qa)+len(qb) == nq && disjoint(qa, qb)
	})
	qa, qb := assigned(a, topic), assigned(b, topic)
	c.Note("%d queues; A %v, B %v", nq, qa, qb)
	c.Check(split, "queues not split between A and B within 45 s: A %v, B %v", qa, qb)
	for i := 0; i < 4*nq; i++ {
		send(c, p, msg(topic, "RB", nil, fmt.Sprintf("phase1-%d", i), nil))
	}
	got.awaitDistinct(1+4*nq, 20*time.Second)
	time.Sleep(1500 * time.Millisecond)
	owner := func(q int) string {
		for _, x := range qa {
			if x == q {
				return "A"
			}
		}
		for _, x := range qb {
			if x == q {
				return "B"
			}
		}
		return "?"
	}
	phase1 := map[string]string{}
	for _, r := range got.snapshot() {
		if r.body() == "warm-0" {
			// Sent before B started: A may consume it and lose its queue to B before the
			// offset is committed (this client commits every 5 s, the first time 10 s after
			// start), so B may get it again. At-least-once; not a check.
			phase1[r.body()] = r.who
			continue
		}
		c.Eq(fmt.Sprintf("consumer of %s (queue %d)", r.body(), r.msg.Queue.QueueId), owner(r.msg.Queue.QueueId), r.who)
		if _, dup := phase1[r.body()]; dup {
			c.Fail(r.body() + " delivered twice in phase 1")
		}
		phase1[r.body()] = r.who
	}
	c.Eq("phase 1 distinct", 1+4*nq, len(phase1))
	before := len(got.snapshot())
	_ = b.Shutdown()
	all := await(45*time.Second, func() bool { return len(assigned(a, topic)) == nq })
	c.Check(all, "A did not take all %d queues within 45 s after B shut down: %v", nq, assigned(a, topic))
	for i := 0; i < 4*nq; i++ {
		send(c, p, msg(topic, "RB", nil, fmt.Sprintf("phase2-%d", i), nil))
	}
	await(20*time.Second, func() bool {
		n := map[string]bool{}
		for _, r := range got.snapshot() {
			if strings.HasPrefix(r.body(), "phase2-") {
				n[r.body()] = true
			}
		}
		return len(n) >= 4*nq
	})
	time.Sleep(2 * time.Second)
	p2 := map[string]bool{}
	for _, r := range got.snapshot()[before:] {
		c.Eq("consumer of "+r.body()+" after B left", "A", r.who)
		if !strings.HasPrefix(r.body(), "phase2-") {
			c.Fail(fmt.Sprintf("%s (%s had it) delivered again after B left", r.body(), phase1[r.body()]))
		} else if p2[r.body()] {
			c.Fail(r.body() + " delivered twice")
		}
		p2[r.body()] = true
	}
	c.Eq("phase 2 messages received by A", 4*nq, countPrefix(p2, "phase2-"))
}

func disjoint(a, b []int) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return false
			}
		}
	}
	return true
}

func countPrefix(m map[string]bool, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// broadcasting: two BROADCASTING consumers of one group each get every message once (offsets
// kept in local files under $HOME/.rocketmq_client_go).
func broadcasting(c *Ctx) {
	topic := c.Name("t")
	group := c.Name("cg")
	p := newProducer(c)
	send(c, p, msg(topic, "BC", nil, "bc-warm", nil))
	mqs, err := queuesOf(c, topic)
	if !c.Check(err == nil && len(mqs) > 0, "queues of %s: %v", topic, err) {
		return
	}
	got := &collector{}
	var cs []pushConsumer
	for _, who := range []string{"A", "B"} {
		pc := newPush(c, group, consumer.WithConsumerModel(consumer.BroadCasting))
		err := pc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, got.listener(who))
		if err == nil {
			err = pc.Start()
		}
		if !c.Check(err == nil, "start consumer %s: %v", who, err) {
			return
		}
		cs = append(cs, pc)
	}
	c.Check(await(20*time.Second, func() bool {
		return len(assigned(cs[0], topic)) == len(mqs) && len(assigned(cs[1], topic)) == len(mqs)
	}), "both consumers did not hold all %d queues: A %v, B %v", len(mqs), assigned(cs[0], topic), assigned(cs[1], topic))
	want := []string{"bc-warm"}
	for i := 0; i < 10; i++ {
		send(c, p, msg(topic, "BC", nil, fmt.Sprintf("bc-%d", i), nil))
		want = append(want, fmt.Sprintf("bc-%d", i))
	}
	sort.Strings(want)
	await(20*time.Second, func() bool { return len(got.snapshot()) >= 2*len(want) })
	time.Sleep(1500 * time.Millisecond)
	for _, who := range []string{"A", "B"} {
		var mine []string
		for _, r := range got.snapshot() {
			if r.who == who {
				mine = append(mine, r.body())
			}
		}
		c.Eq("bodies consumer "+who+" received", want, sortedSet(mine))
		c.Eq("deliveries to consumer "+who, len(want), len(mine))
	}
}

// delayLevels: DELAY levels 1 (1 s) and 2 (5 s) reach a subscribed consumer after their delays,
// on the original topic, with their tags and properties.
func delayLevels(c *Ctx) {
	topic := c.Name("t")
	p := newProducer(c)
	send(c, p, msg(topic, "Now", nil, "now", nil))
	got := &collector{}
	pc := newPush(c, c.Name("cg"))
	err := pc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, got.listener("c"))
	if err == nil {
		err = pc.Start()
	}
	if !c.Check(err == nil, "start push consumer: %v", err) {
		return
	}
	c.Check(got.awaitDistinct(1, 15*time.Second), "undelayed message not consumed")
	level := map[string]int{"delay-5s": 2, "delay-1s": 1}
	sentAt := map[string]time.Time{}
	for _, body := range []string{"delay-5s", "delay-1s"} {
		m := msg(topic, "Delayed", []string{"dk"}, body, props("level", strconv.Itoa(level[body])))
		m.WithDelayTimeLevel(level[body])
		sentAt[body] = time.Now()
		send(c, p, m)
	}
	got.awaitDistinct(3, 25*time.Second)
	time.Sleep(time.Second)
	delay := map[string]int64{}
	for _, r := range got.snapshot() {
		if t, ok := sentAt[r.body()]; ok {
			delay[r.body()] = r.at.Sub(t).Milliseconds()
			c.Eq(r.body()+" topic", topic, r.msg.Topic)
			c.Eq(r.body()+" tags", "Delayed", r.msg.GetTags())
			c.Eq(r.body()+" user properties", props("level", strconv.Itoa(level[r.body()])), userProps(&r.msg.Message))
		}
	}
	c.Note("observed delays %v ms", delay)
	c.Eq("deliveries", 3, len(got.snapshot()))
	d1, ok1 := delay["delay-1s"]
	d5, ok5 := delay["delay-5s"]
	c.Check(ok1 && d1 >= 800 && d1 <= 6000, "level 1 (1 s) delivered after %d ms", d1)
	c.Check(ok5 && d5 >= 4500 && d5 <= 12000, "level 2 (5 s) delivered after %d ms", d5)
}
