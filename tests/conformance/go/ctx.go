package main

import (
	"fmt"
	"math/rand"
	"reflect"
	"strconv"
	"sync"
	"time"
)

// Ctx is what one scenario run sees: its unique names, and its checks (each one can fail).
type Ctx struct {
	scenario string
	namesrv  string
	runID    string

	mu       sync.Mutex
	failures []string
	observed []string
	closers  []func()
	names    int
}

func newCtx(scenario, namesrv, runID string) *Ctx {
	return &Ctx{scenario: scenario, namesrv: namesrv, runID: runID}
}

func newRunID() string {
	return strconv.FormatInt(time.Now().UnixMilli()%100_000_000, 36) + strconv.FormatInt(int64(rand.Intn(1296)), 36)
}

// Name is a topic or group name unique to this run and scenario: allowed characters only, < 128.
func (c *Ctx) Name(kind string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names++
	s := fmt.Sprintf("cf_%s_%s%d_%s", c.scenario, kind, c.names, c.runID)
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

func (c *Ctx) Note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.observed = append(c.observed, fmt.Sprintf(format, args...))
}

func (c *Ctx) Fail(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, what)
}

// Check records a failure unless ok.
func (c *Ctx) Check(ok bool, format string, args ...any) bool {
	if !ok {
		c.Fail(fmt.Sprintf(format, args...))
	}
	return ok
}

// Eq is an expected-vs-observed check; the message names both.
func (c *Ctx) Eq(what string, expected, actual any) bool {
	ok := reflect.DeepEqual(expected, actual)
	if !ok {
		c.Fail(fmt.Sprintf("%s: expected %s, observed %s", what, show(expected), show(actual)))
	}
	return ok
}

// CloseLater registers f to run when the scenario ends (last registered runs first).
func (c *Ctx) CloseLater(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closers = append(c.closers, f)
}

func (c *Ctx) closeAll() {
	c.mu.Lock()
	cs := c.closers
	c.closers = nil
	c.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		done := make(chan struct{})
		go func(f func()) {
			defer close(done)
			defer func() { _ = recover() }() // shutting down a client that already failed
			f()
		}(cs[i])
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
}

func (c *Ctx) results() ([]string, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.failures...), append([]string(nil), c.observed...)
}

func show(v any) string {
	s := fmt.Sprintf("%v", v)
	if sv, ok := v.(string); ok {
		s = strconv.Quote(sv)
	}
	if len(s) > 300 {
		s = fmt.Sprintf("%s...(%d chars)", s[:300], len(s))
	}
	return s
}
