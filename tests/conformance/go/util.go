package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// instance is a unique client instance name: the client id is IP@instance, and clients of one
// process that share it share one connection pool, route table and rebalance schedule.
func instance() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "cfgo" + hex.EncodeToString(b)
}

func resolver(c *Ctx) primitive.NsResolver {
	return primitive.NewPassthroughResolver([]string{c.namesrv})
}

// newProducer starts a producer with a unique group and instance, no send retries; the
// context shuts it down.
func newProducer(c *Ctx, opts ...producer.Option) rocketmq.Producer {
	all := append([]producer.Option{
		producer.WithNsResolver(resolver(c)),
		producer.WithGroupName(c.Name("pg")),
		producer.WithInstanceName(instance()),
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(10 * time.Second),
	}, opts...)
	p, err := rocketmq.NewProducer(all...)
	if err != nil {
		panic(fmt.Sprintf("new producer: %v", err))
	}
	if err := p.Start(); err != nil {
		panic(fmt.Sprintf("start producer: %v", err))
	}
	c.CloseLater(func() { _ = p.Shutdown() })
	return p
}

// pushConsumer is what consumer.NewPushConsumer returns (an unexported type of the client).
type pushConsumer = rocketmq.PushConsumer

// newPush builds a push consumer of group with a unique instance, consuming from the first
// offset (a new group), not started; the context shuts it down.
func newPush(c *Ctx, group string, opts ...consumer.Option) pushConsumer {
	all := append([]consumer.Option{
		consumer.WithNsResolver(resolver(c)),
		consumer.WithGroupName(group),
		consumer.WithInstance(instance()),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumeGoroutineNums(4),
	}, opts...)
	pc, err := consumer.NewPushConsumer(all...)
	if err != nil {
		panic(fmt.Sprintf("new push consumer: %v", err))
	}
	c.CloseLater(func() { _ = pc.Shutdown() })
	return pc
}

// send sends one message synchronously; a failure is recorded and nil returned.
func send(c *Ctx, p rocketmq.Producer, msgs ...*primitive.Message) *primitive.SendResult {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r, err := p.SendSync(ctx, msgs...)
	if err != nil {
		c.Fail(fmt.Sprintf("send of %s: %v", bodyOf(msgs[0]), err))
		return nil
	}
	if r.Status != primitive.SendOK {
		c.Fail(fmt.Sprintf("send status of %s: expected SEND_OK, observed %v", bodyOf(msgs[0]), r.Status))
	}
	return r
}

func bodyOf(m *primitive.Message) string { return string(m.Body) }

// msg builds a message with tag, keys (space-separated in KEYS) and user properties.
func msg(topic, tag string, keys []string, body string, props map[string]string) *primitive.Message {
	m := primitive.NewMessage(topic, []byte(body))
	if tag != "" {
		m.WithTag(tag)
	}
	if len(keys) > 0 {
		m.WithKeys(keys)
	}
	for k, v := range props {
		m.WithProperty(k, v)
	}
	return m
}

// systemProps is Java's MessageConst.STRING_HASH_SET (rocketmq-common 5.5.0): every property
// name that is not a user property.
var systemProps = map[string]bool{}

func init() {
	for _, k := range strings.Fields(`1ST_POP_TIME ARRIVE_TIME BORN_TIMESTAMP BUYER_ID CLUSTER
		CONSUME_START_TIME CORRECTION_FLAG CORRELATION_ID DELAY DLQ_ORIGIN_MESSAGE_ID DLQ_ORIGIN_TOPIC
		DUP_INFO EXTEND_UNIQ_INFO INNER_MULTI_QUEUE_OFFSET INSTANCE_ID KEYS MAX_OFFSET
		MAX_RECONSUME_TIMES MIN_OFFSET MQ2_FLAG MSG_REGION MSG_TYPE ORIGIN_GROUP ORIGIN_MESSAGE_ID
		PGROUP POP_CK POP_CK_OFFSET PUSH_REPLY_TIME REAL_QID REAL_TOPIC RECONSUME_TIME
		REPLY_TO_CLIENT RETRY_TOPIC TAGS TIMER_DELAY_LEVEL TIMER_DELAY_MS TIMER_DELAY_SEC
		TIMER_DELIVER_MS TIMER_DEL_UNIQKEY TIMER_DEQUEUE_MS TIMER_ENQUEUE_MS TIMER_OUT_MS
		TIMER_ROLL_TIMES TRACE_ON TRANSFER_FLAG TRAN_MSG TRAN_PREPARED_QUEUE_OFFSET TTL UNIQ_KEY
		WAIT _SYS_MSG_PRIORITY_ __BORNHOST __CRC32# __LITE_TOPIC`) {
		systemProps[k] = true
	}
}

// userProps is a message's properties minus the system ones.
func userProps(m *primitive.Message) map[string]string {
	out := map[string]string{}
	for k, v := range m.GetProperties() {
		if !systemProps[k] {
			out[k] = v
		}
	}
	return out
}

func props(kv ...string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func await(timeout time.Duration, done func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if done() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return done()
}

// awaitSteady is await whose condition must then hold at every check for `hold` in a row.
func awaitSteady(timeout, hold time.Duration, done func() bool) bool {
	deadline := time.Now().Add(timeout)
	var since time.Time
	for time.Now().Before(deadline) {
		switch {
		case !done():
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= hold:
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// ---- push-consumer deliveries ------------------------------------------------------------------

type received struct {
	msg *primitive.MessageExt
	at  time.Time
	who string
}

func (r received) body() string { return string(r.msg.Body) }

type collector struct {
	mu  sync.Mutex
	all []received
}

func (c *collector) add(who string, msgs ...*primitive.MessageExt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for _, m := range msgs {
		c.all = append(c.all, received{msg: m, at: now, who: who})
	}
}

func (c *collector) snapshot() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]received(nil), c.all...)
}

func (c *collector) bodies() []string {
	var out []string
	for _, r := range c.snapshot() {
		out = append(out, r.body())
	}
	return out
}

func (c *collector) distinct() map[string]bool {
	out := map[string]bool{}
	for _, b := range c.bodies() {
		out[b] = true
	}
	return out
}

func (c *collector) awaitDistinct(n int, timeout time.Duration) bool {
	return await(timeout, func() bool { return len(c.distinct()) >= n })
}

// listener returns a concurrently-consuming callback that records every delivery as who.
func (c *collector) listener(who string) func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	return func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		c.add(who, msgs...)
		return consumer.ConsumeSuccess, nil
	}
}

func sortedSet(xs []string) []string {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	out := make([]string, 0, len(m))
	for x := range m {
		out = append(out, x)
	}
	sort.Strings(out)
	return out
}

// ---- a look inside the push consumer ------------------------------------------------------------
// The Go client exports neither the queues a push consumer holds nor a way to refresh routes
// sooner than its fixed 30 s (routes) and 20 s (rebalance) schedules. These read its unexported
// fields by reflection, as the Java scenarios read RebalanceImpl.getProcessQueueTable().

func unexported(v reflect.Value, name string) reflect.Value {
	f := v.FieldByName(name)
	if !f.IsValid() {
		panic("rocketmq-client-go has no field " + name)
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

func consumerStruct(pc any) reflect.Value {
	return reflect.ValueOf(pc).Elem() // *pushConsumer -> pushConsumer (embeds *defaultConsumer)
}

// assigned is the queue ids of topic the consumer currently holds (its process-queue table).
func assigned(pc any, topic string) []int {
	table := unexported(consumerStruct(pc), "processQueueTable").Addr().Interface().(*sync.Map)
	var out []int
	table.Range(func(k, _ any) bool {
		if mq, ok := k.(primitive.MessageQueue); ok && mq.Topic == topic {
			out = append(out, mq.QueueId)
		}
		return true
	})
	sort.Ints(out)
	return out
}

// refreshRoutes makes the consumer's client do now what it does every 30 s and 20 s: update
// every subscribed topic's route from the name server, then rebalance.
func refreshRoutes(pc any) {
	client := unexported(consumerStruct(pc), "client")
	client.MethodByName("UpdateTopicRouteInfo").Call(nil)
	client.MethodByName("RebalanceImmediately").Call(nil)
}

// awaitRetryQueue waits until the consumer pulls its group's retry topic. The broker creates
// %RETRY%group at the consumer's heartbeat, after the client looked up that route at start, and
// the client asks again only every 30 s: refresh it every second until the queue is held.
func awaitRetryQueue(c *Ctx, pc any, group string) {
	retry := "%RETRY%" + group
	ok := await(30*time.Second, func() bool {
		if len(assigned(pc, retry)) > 0 {
			return true
		}
		refreshRoutes(pc)
		time.Sleep(900 * time.Millisecond)
		return len(assigned(pc, retry)) > 0
	})
	c.Check(ok, "the consumer was not pulling %s 30 s after start (no route for it?)", retry)
}

// committedOffset is the offset the broker holds for group on mq (QUERY_CONSUMER_OFFSET, code
// 14), asked through the started producer's client: the Go client exports no offset query, so
// the request is built by reflection as the fields above are read.
func committedOffset(p rocketmq.Producer, group string, mq *primitive.MessageQueue) (int64, error) {
	client := unexported(reflect.ValueOf(p).Elem(), "client")
	names := client.MethodByName("GetNameSrv").Call(nil)[0]
	addr := names.MethodByName("FindBrokerAddrByName").Call([]reflect.Value{reflect.ValueOf(mq.BrokerName)})[0].String()
	if addr == "" {
		return -1, fmt.Errorf("no address for broker %s", mq.BrokerName)
	}
	invoke := client.MethodByName("InvokeSync")
	request := reflect.New(invoke.Type().In(2).Elem())
	fields := request.Elem()
	fields.FieldByName("Code").SetInt(14)
	fields.FieldByName("Language").SetUint(9) // Go
	fields.FieldByName("Version").SetInt(317)
	fields.FieldByName("Opaque").SetInt(int64(queryOpaque.Add(1)))
	fields.FieldByName("ExtFields").Set(reflect.ValueOf(map[string]string{
		"consumerGroup": group,
		"topic":         mq.Topic,
		"queueId":       fmt.Sprint(mq.QueueId),
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	out := invoke.Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(addr), request, reflect.ValueOf(3 * time.Second)})
	if err, _ := out[1].Interface().(error); err != nil {
		return -1, err
	}
	response := out[0].Elem()
	switch code := response.FieldByName("Code").Int(); code {
	case 0:
		return strconv.ParseInt(response.FieldByName("ExtFields").Interface().(map[string]string)["offset"], 10, 64)
	case 22: // QUERY_NOT_FOUND: nothing committed yet
		return -1, nil
	default:
		return -1, fmt.Errorf("QUERY_CONSUMER_OFFSET answered %d: %s", code, response.FieldByName("Remark").String())
	}
}

// queryOpaque numbers committedOffset's requests apart from the client's own, which count up
// from zero in the same process.
var queryOpaque = func() *atomic.Int32 {
	var n atomic.Int32
	n.Store(1 << 30)
	return &n
}()

// ---- reading a topic back ----------------------------------------------------------------------

// queuesOf is the topic's queues from the name server's route (readable or not).
func queuesOf(c *Ctx, topic string) ([]*primitive.MessageQueue, error) {
	a, err := admin.NewAdmin(admin.WithResolver(resolver(c)))
	if err != nil {
		return nil, err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.FetchPublishMessageQueues(ctx, topic)
}

// readAll reads a topic from queue offset 0 with PULL_MESSAGE through a fresh pull-consumer
// group, until at least expected messages were read or the timeout passed; sorted by queue id
// then queue offset.
func readAll(c *Ctx, topic string, expected int, timeout time.Duration) []*primitive.MessageExt {
	deadline := time.Now().Add(timeout)
	var lastErr error
	var pc interface {
		PullFrom(context.Context, *primitive.MessageQueue, int64, int) (*primitive.PullResult, error)
		Shutdown() error
	}
	for pc == nil && time.Now().Before(deadline) {
		p, err := consumer.NewPullConsumer(
			consumer.WithNsResolver(resolver(c)),
			consumer.WithGroupName(c.Name("reader")),
			consumer.WithInstance(instance()),
		)
		if err == nil {
			err = p.Subscribe(topic, consumer.MessageSelector{})
		}
		if err == nil {
			err = p.Start() // fails while the topic has no route
		}
		if err != nil {
			lastErr = err
			time.Sleep(500 * time.Millisecond)
			continue
		}
		pc = p
	}
	if pc == nil {
		c.Note("reader for %s did not start: %v", topic, lastErr)
		return nil
	}
	defer pc.Shutdown()
	next := map[int]int64{}
	var out []*primitive.MessageExt
	for {
		mqs, err := queuesOf(c, topic)
		if err != nil {
			lastErr = err
		}
		for _, mq := range mqs {
			off := next[mq.QueueId]
			for {
				// The client's PullFrom asks the broker to hold the pull while the queue has
				// nothing at off (long polling): a short timeout, and no pull at the max offset.
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				r, err := pc.PullFrom(ctx, mq, off, 32)
				cancel()
				if err != nil {
					lastErr = err
					break
				}
				if r.Status == primitive.PullFound {
					out = append(out, r.GetMessageExts()...)
					off = r.NextBeginOffset
					if off >= r.MaxOffset {
						break
					}
				} else if r.Status == primitive.PullOffsetIllegal && r.NextBeginOffset > off {
					off = r.NextBeginOffset
				} else {
					break
				}
			}
			next[mq.QueueId] = off
		}
		if len(out) >= expected || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if len(out) < expected && lastErr != nil {
		c.Note("reader error: %v", lastErr)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Queue.QueueId != out[j].Queue.QueueId {
			return out[i].Queue.QueueId < out[j].Queue.QueueId
		}
		return out[i].QueueOffset < out[j].QueueOffset
	})
	return out
}
