package load

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/e2e/internal/e2etest"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/hostsim/serve"
)

// The run's size. make test runs the defaults; make soak gives -load.duration.
var (
	flagRequests    = flag.Int("load.requests", 20000, "requests TestLoad sends (ignored with -load.duration)")
	flagDuration    = flag.Duration("load.duration", 0, "run TestLoad for this long instead of -load.requests (the soak)")
	flagConcurrency = flag.Int("load.concurrency", 64, "concurrent clients")
	flagWorkers     = flag.Int("load.workers", 4, "worker VMs (Envoy's --concurrency)")
	flagSeed        = flag.Uint64("load.seed", 1, "seed of the request mix")
	flagBenchReqs   = flag.Int("load.bench-requests", 1500, "requests per module per round of BenchmarkLoad")
)

// policyPath is the load policy, relative to this package (go test runs in it).
const policyPath = "testdata/load.yaml"

// adminToken is the load policy's admin token.
const adminToken = "load-admin-token"

// idParam is the query parameter every request carries its number in: the filter routes
// on the path without the query, and the access line and the fakes' records keep it.
const idParam = "load"

// proxy is a started serve with its access log and guest log.
type proxy struct {
	*serve.Instance
	access     *accessLog
	guest      *guestLog
	adminCalls atomic.Int64 // admin API calls made: streams the filter sees too
}

// startProxy starts serve in-process on the load policy with module (a path under build/,
// which must be built and fresh: a missing or stale one fails with "run make build"),
// the admin listener on, and the built-in fakes without pacing (fast fakes: a stream's
// events go out at once unless a request asks for a delay).
func startProxy(t testing.TB, module string, workers int) *proxy {
	t.Helper()
	opts := e2etest.ServeOptions(t, module)
	opts.PolicyPath = policyPath
	opts.Workers = workers
	p := &proxy{access: newAccessLog(), guest: &guestLog{}}
	p.Instance = e2etest.StartInstance(t, opts, p.access, p.guest)
	for _, f := range p.Fakes {
		f.SetPacing(fakeprovider.Pacing{})
	}
	return p
}

// fake returns the built-in fake serving cluster.
func (p *proxy) fake(t testing.TB, cluster string) *fakeprovider.Server {
	t.Helper()
	f, ok := p.Fakes[cluster]
	if !ok {
		t.Fatalf("no built-in fake for %s", cluster)
	}
	return f
}

// newClient is an HTTP/1.1 client with an idle connection for every concurrent request;
// it never goes through a proxy from the environment.
func newClient(concurrency int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        2 * concurrency,
		MaxIdleConnsPerHost: 2 * concurrency,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}}
}

// requestURL is the URL of request id on path.
func requestURL(base, path string, id int) string {
	return base + path + "?" + idParam + "=" + strconv.Itoa(id)
}

// admin calls the filter's admin API on the front end and returns its JSON reply.
func (p *proxy) admin(c *http.Client, path string) (gjson.Result, error) {
	req, err := http.NewRequest(http.MethodGet, p.URL()+"/spillway/api/"+path, nil)
	if err != nil {
		return gjson.Result{}, err
	}
	req.Header.Set("authorization", "Bearer "+adminToken)
	p.adminCalls.Add(1)
	resp, err := c.Do(req)
	if err != nil {
		return gjson.Result{}, fmt.Errorf("admin %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || !gjson.ValidBytes(b) {
		return gjson.Result{}, fmt.Errorf("admin %s: %d %v %q", path, resp.StatusCode, err, b)
	}
	return gjson.ParseBytes(b), nil
}

// prometheus scrapes the admin listener's /stats/prometheus and returns each series'
// value by its line's name and labels as printed (e.g. `spillway_requests_total` or
// `spillway_route_requests_total{spillway_route_model="gpt-4o",...}`).
func (p *proxy) prometheus(t testing.TB, c *http.Client) map[string]float64 {
	t.Helper()
	resp, err := c.Get("http://" + p.AdminAddr + "/stats/prometheus")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("scrape: bad line %q", line)
		}
		out[strings.TrimSuffix(line[:i], "{}")] = v // a series without labels prints as name{}
	}
	return out
}

// sumSeries adds up the series of one metric whose labels contain every one of labels
// (each `name="value"`).
func sumSeries(series map[string]float64, metric string, labels ...string) float64 {
	var n float64
	for k, v := range series {
		name, rest, _ := strings.Cut(k, "{")
		if name != metric {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(rest, l)
		}
		if ok {
			n += v
		}
	}
	return n
}

// eventually polls cond until it holds or hostsimtest.WaitLimit passed, and reports
// whether it held. It is for state that settles on its own shortly after the requests
// end (the filter's counters reach Envoy's stats on the next tick; a fake's handler
// returns once it sees its client gone); it never times anything.
func eventually(cond func() bool) bool {
	deadline := time.Now().Add(hostsimtest.WaitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// accessLine is one request's access line, as serve writes it when the stream ends.
type accessLine struct {
	status                                string // the status, "client-gone" or "reset(details)"
	provider, connection, model, attempts string
	flags, details                        string
}

// accessLog parses serve's access lines as they are written and keeps those of the
// numbered requests; it can be waited on.
type accessLog struct {
	mu      sync.Mutex
	partial []byte
	byID    map[int][]accessLine
	other   int           // lines of requests without a number (admin calls)
	bad     []string      // lines that did not parse
	written chan struct{} // closed, and replaced, by every write
}

func newAccessLog() *accessLog { return &accessLog{byID: map[int][]accessLine{}} }

// Write implements io.Writer.
func (a *accessLog) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.partial = append(a.partial, p...)
	for {
		i := bytes.IndexByte(a.partial, '\n')
		if i < 0 {
			break
		}
		a.parse(string(a.partial[:i]))
		a.partial = a.partial[i+1:]
	}
	if a.written != nil {
		close(a.written)
		a.written = nil
	}
	return len(p), nil
}

// parse reads `date time METHOD URI STATUS DURATION WORKER provider=.. connection=..
// model=.. attempts=.. flags=.. details=..`.
func (a *accessLog) parse(line string) {
	f := strings.Fields(line)
	if len(f) != 13 {
		a.bad = append(a.bad, line)
		return
	}
	u, err := url.ParseRequestURI(f[3])
	if err != nil {
		a.bad = append(a.bad, line)
		return
	}
	raw := u.Query().Get(idParam)
	if raw == "" {
		a.other++
		return
	}
	id, err := strconv.Atoi(raw)
	if err != nil {
		a.bad = append(a.bad, line)
		return
	}
	l := accessLine{status: f[4]}
	for _, kv := range f[7:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "provider":
			l.provider = v
		case "connection":
			l.connection = v
		case "model":
			l.model = v
		case "attempts":
			l.attempts = v
		case "flags":
			l.flags = v
		case "details":
			l.details = v
		}
	}
	a.byID[id] = append(a.byID[id], l)
}

// await waits until every request of ids has a line (woken by the writes, bounded by
// hostsimtest.WaitLimit), and returns those that still have none.
func (a *accessLog) await(ids []int) []int {
	limit := time.NewTimer(hostsimtest.WaitLimit)
	defer limit.Stop()
	for {
		a.mu.Lock()
		var missing []int
		for _, id := range ids {
			if len(a.byID[id]) == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			a.mu.Unlock()
			return nil
		}
		if a.written == nil {
			a.written = make(chan struct{})
		}
		written := a.written
		a.mu.Unlock()
		select {
		case <-written:
		case <-limit.C:
			return missing
		}
	}
}

// lines returns the lines of request id.
func (a *accessLog) lines(id int) []accessLine {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]accessLine(nil), a.byID[id]...)
}

// counts returns how many numbered requests have lines, the lines of unnumbered requests
// and the lines that did not parse.
func (a *accessLog) counts() (numbered, other int, bad []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byID), a.other, append([]string(nil), a.bad...)
}

// guestLog keeps the guest's and serve's log lines at warning level and above, with how
// many lines each level had: a run of minutes must not keep every line in memory.
type guestLog struct {
	mu      sync.Mutex
	partial []byte
	levels  map[string]int // "[warn]" -> count
	serious []string       // the first lines at error level and above, and serve's own errors
}

// maxSerious bounds guestLog.serious.
const maxSerious = 20

// Write implements io.Writer.
func (g *guestLog) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.levels == nil {
		g.levels = map[string]int{}
	}
	g.partial = append(g.partial, p...)
	for {
		i := bytes.IndexByte(g.partial, '\n')
		if i < 0 {
			break
		}
		line := string(g.partial[:i])
		g.partial = g.partial[i+1:]
		level, _, _ := strings.Cut(line, " ")
		g.levels[level]++
		if isSerious(line, level) && len(g.serious) < maxSerious {
			g.serious = append(g.serious, line)
		}
	}
	return len(p), nil
}

// isSerious reports a line no load should cause: the guest's errors, critical lines and
// panics, and serve's own error reports ("serve: ...").
func isSerious(line, level string) bool {
	return level == "[error]" || level == "[critical]" || strings.Contains(line, "panic") ||
		strings.HasPrefix(line, "serve:")
}

// report returns the counts per level and the serious lines.
func (g *guestLog) report() (map[string]int, []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	levels := map[string]int{}
	for k, v := range g.levels {
		levels[k] = v
	}
	return levels, append([]string(nil), g.serious...)
}
