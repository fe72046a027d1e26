package load

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// benchRounds is how many rounds each module runs per benchmark iteration; they take
// turns, the order flipping every round, so a machine that slows down for a while slows
// both.
const benchRounds = 4

// benchWarmup is how many unmeasured requests each module gets first.
const benchWarmup = 300

// benchKind is the success-only request both modules get: a chat completion that the
// filter routes to a connection of openai (openrouter when both keys are at their cap),
// and that noop.wasm, which routes nothing, lets through to serve's default cluster, the
// policy's first provider's (fake-openai). What they share is the measurement: the same
// serve front end and upstream fakes, the same client and request; the difference is the
// filter's work (holding the request for its body, routing, the concurrency slot, the
// credential and the x-spillway-* headers).
var benchKind = kind{name: "bench", path: "/v1/chat/completions", model: "gpt-4o-mini",
	statuses: []int{200}, providers: []string{"openai", "openrouter"}}

// BenchmarkLoad runs the success-only request through serve with build/spillway.wasm and
// build/noop.wasm in the same run, at one client (the latency one request pays) and at
// -load.concurrency (the load test's), over -load.workers VMs each. It reports each
// module's requests per second and p50/p99 latency over all rounds, the latency Spillway
// adds at p50 and p99 (spillway minus noop), and x-noop-median, the median over rounds of
// spillway's time for a round's requests over noop's in the same round. Every answer is
// checked (status, body, and the x-spillway-* headers on spillway's only), so a module
// that takes another path fails instead of looking fast.
func BenchmarkLoad(b *testing.B) {
	sp := startProxy(b, "build/spillway.wasm", *flagWorkers)
	noop := startProxy(b, "build/noop.wasm", *flagWorkers)
	for _, conc := range []int{1, *flagConcurrency} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) { benchLoad(b, sp, noop, conc) })
	}
}

func benchLoad(b *testing.B, sp, noop *proxy, conc int) {
	c := newClient(conc)
	tg := targetsOf(sp.Policy.Resolved)
	mods := []struct {
		name  string
		p     *proxy
		check func(*http.Response) error
	}{
		{"spillway", sp, func(r *http.Response) error {
			o := outcome{status: r.StatusCode, header: r.Header}
			return benchKind.check(&o, r.Body, func() {}, tg)
		}},
		{"noop", noop, checkNoop},
	}
	var ids atomic.Int64
	for _, m := range mods {
		if _, err := round(c, m.p, &ids, benchWarmup, conc, m.check); err != nil {
			b.Fatalf("%s warm-up: %v", m.name, err)
		}
	}
	var lat [2][]time.Duration
	var walls [2][]time.Duration
	var ratios []float64
	b.ResetTimer()
	for range b.N {
		for r := range benchRounds {
			var wall [2]time.Duration
			for turn := range 2 {
				i := turn ^ (r & 1)
				start := time.Now()
				l, err := round(c, mods[i].p, &ids, *flagBenchReqs, conc, mods[i].check)
				wall[i] = time.Since(start)
				if err != nil {
					b.Fatalf("%s: %v", mods[i].name, err)
				}
				lat[i] = append(lat[i], l...)
				walls[i] = append(walls[i], wall[i])
			}
			ratios = append(ratios, float64(wall[0])/float64(wall[1]))
		}
	}
	b.StopTimer()
	rps := func(i int) float64 {
		var sum time.Duration
		for _, w := range walls[i] {
			sum += w
		}
		return float64(len(walls[i])**flagBenchReqs) / sum.Seconds()
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	p50s, p50n := percentile(lat[0], 0.50), percentile(lat[1], 0.50)
	p99s, p99n := percentile(lat[0], 0.99), percentile(lat[1], 0.99)
	slices.Sort(ratios)
	b.ReportMetric(1e9/rps(0), "ns/op")
	b.ReportMetric(rps(0), "req/s")
	b.ReportMetric(rps(1), "noop-req/s")
	b.ReportMetric(ratios[len(ratios)/2], "x-noop-median")
	b.ReportMetric(us(p50s), "p50-us")
	b.ReportMetric(us(p50n), "noop-p50-us")
	b.ReportMetric(us(p50s-p50n), "p50-added-us")
	b.ReportMetric(us(p99s), "p99-us")
	b.ReportMetric(us(p99n), "noop-p99-us")
	b.ReportMetric(us(p99s-p99n), "p99-added-us")
}

// checkNoop checks noop's answer: the fake's chat completion for the requested model, with
// none of Spillway's headers (nothing routed it).
func checkNoop(r *http.Response) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	text := gjson.GetBytes(b, "choices.0.message.content").Str
	if r.StatusCode != http.StatusOK || r.Header.Get("x-spillway-provider") != "" ||
		!strings.HasPrefix(text, "Hello from fake-openai,") || !strings.HasSuffix(text, " answering as "+benchKind.model+".") {
		return fmt.Errorf("noop: %d %v %.300s", r.StatusCode, r.Header, b)
	}
	return nil
}

// round sends n benchKind requests from conc clients and returns each one's latency, or
// the first answer that failed its check.
func round(c *http.Client, p *proxy, ids *atomic.Int64, n, conc int, check func(*http.Response) error) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	body := benchKind.body()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				start := time.Now()
				err := benchOne(c, p, int(ids.Add(1)), body, check)
				lat[i] = time.Since(start)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return lat, firstErr
}

func benchOne(c *http.Client, p *proxy, id int, body string, check func(*http.Response) error) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, requestURL(p.URL(), benchKind.path, id), strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return check(resp)
}
