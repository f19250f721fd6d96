// Command conformance-go runs the Go-client conformance scenarios (github.com/apache/rocketmq-client-go/v2)
// against the name server at --namesrv: Apache RocketMQ (the oracle) or skiff.
//
//	conformance-go --namesrv 127.0.0.1:9876 [--only a,b] [--parallel 4] [--list]
//
// Prints `SCENARIOS name...` first, then per scenario one line `PASS name (secs): observed` or
// `FAIL name (secs): failures || observed: ...` (the format run.sh counts, as the Java harness),
// then `N passed, M failed`. Exit 0 iff all passed. Names unknown here are skipped (run.sh
// passes one --only list to every harness). Every scenario uses topic and group names unique to
// the run. The client's own log goes to stderr at warn level.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
)

type def struct {
	name    string
	timeout time.Duration
	body    func(*Ctx)
}

func main() {
	namesrv := flag.String("namesrv", "", "name server address host:port")
	only := flag.String("only", "", "comma-separated scenario names (others skipped)")
	parallel := flag.Int("parallel", 4, "scenarios at once")
	list := flag.Bool("list", false, "print the scenario names and exit")
	flag.Parse()

	rlog.SetLogLevel("warn")

	all := scenarios()
	var chosen []def
	if *only == "" {
		chosen = all
	} else {
		want := map[string]bool{}
		for _, n := range strings.Split(*only, ",") {
			want[strings.TrimSpace(n)] = true
		}
		for _, d := range all {
			if want[d.name] {
				chosen = append(chosen, d)
			}
		}
	}
	names := make([]string, len(chosen))
	for i, d := range chosen {
		names[i] = d.name
	}
	fmt.Println("SCENARIOS " + strings.Join(names, " "))
	if *list || len(chosen) == 0 {
		return
	}
	if *namesrv == "" {
		fmt.Fprintln(os.Stderr, "--namesrv is required")
		os.Exit(2)
	}
	runID := newRunID()
	// Longest first, so the slow ones overlap with the rest.
	order := append([]def(nil), chosen...)
	sort.SliceStable(order, func(i, j int) bool { return order[i].timeout > order[j].timeout })

	var (
		mu             sync.Mutex
		passed, failed int
		wg             sync.WaitGroup
	)
	sem := make(chan struct{}, max(1, *parallel))
	for _, d := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func(d def) {
			defer wg.Done()
			defer func() { <-sem }()
			ok := runOne(d, *namesrv, runID)
			mu.Lock()
			if ok {
				passed++
			} else {
				failed++
			}
			mu.Unlock()
		}(d)
	}
	wg.Wait()
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	// Client goroutines of failed scenarios may linger: exit explicitly.
	if failed > 0 {
		os.Exit(1)
	}
	os.Exit(0)
}

var printMu sync.Mutex

func runOne(d def, namesrv, runID string) bool {
	ctx := newCtx(d.name, namesrv, runID)
	t0 := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				ctx.Fail(fmt.Sprintf("panic: %v", r))
			}
		}()
		d.body(ctx)
	}()
	select {
	case <-done:
	case <-time.After(d.timeout):
		ctx.Fail(fmt.Sprintf("scenario timed out after %s", d.timeout))
	}
	ctx.closeAll()
	secs := time.Since(t0).Seconds()
	failures, observed := ctx.results()
	obs := strings.Join(observed, "; ")
	var line string
	if len(failures) == 0 {
		line = fmt.Sprintf("PASS %s (%.1fs): %s", d.name, secs, obs)
	} else {
		line = fmt.Sprintf("FAIL %s (%.1fs): %s", d.name, secs, strings.Join(failures, " | "))
		if obs != "" {
			line += " || observed: " + obs
		}
	}
	printMu.Lock()
	fmt.Println(oneLine(line))
	os.Stdout.Sync()
	printMu.Unlock()
	return len(failures) == 0
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}
