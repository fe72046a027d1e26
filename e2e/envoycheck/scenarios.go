package envoycheck

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/spillwayproxy/spillway/hostsim"
)

// Scenario is one probe script and the request that drives it: the same in Envoy and in
// hostsim. Scripts use only ops whose output is the same in two correct runs (no clocks, no
// CAS values; a callout's token is normalized).
type Scenario struct {
	Name   string
	Script string // the probe's plugin configuration
	Method string
	Path   string
	Body   string // sent with content-length when not empty
}

// Scenarios are what envoy-check runs.
var Scenarios = []Scenario{
	{Name: "headers", Method: "GET", Path: "/probe?x=1", Script: `
request_headers get_header 0 :path
request_headers get_header 0 :method
request_headers get_header 0 user-agent
request_headers add_header 0 x-probe yes
response_headers get_header 2 :status
response_headers add_header 2 x-probe-response yes
log get_header 0 x-probe
log get_header 2 x-probe-response`},
	{Name: "properties", Method: "GET", Path: "/probe", Script: `
request_headers get_property request.path
request_headers get_property request.method
request_headers get_property request.host
request_headers get_property plugin_root_id
request_headers get_property plugin_name
request_headers get_property cluster_name
response_headers get_property response.code
log get_property response.code_details`},
	{Name: "body", Method: "POST", Path: "/probe", Body: "hello probe", Script: `
request_body get_buffer 0 0 100
response_body get_buffer 1 0 100`},
	{Name: "local_reply", Method: "GET", Path: "/probe", Script: `
request_headers local_response 403 denied+by+probe denied -
response_headers get_header 2 :status
log get_property response.code_details`},
	{Name: "callout", Method: "GET", Path: "/probe", Script: `
request_headers http_call callout 1000 :method=GET,:path=/pong,:authority=callout -
request_headers ret 1
http_call_response get_header 6 :status
http_call_response get_buffer 4 0 100
http_call_response effective 2
http_call_response continue 0`},
}

// Names of the probe's plugin and of the clusters the scenarios reach.
const (
	pluginName      = "envoycheck"
	rootID          = "envoycheck"
	upstreamCluster = "upstream"
	calloutCluster  = "callout"
	authority       = "envoycheck.local"
	userAgent       = "envoy-check"
)

// answer is the upstream's (and the callout cluster's) answer to a path: "/pong" is pong,
// anything else a greeting.
func answer(path string) (status int, body string) {
	if strings.HasPrefix(path, "/pong") {
		return 200, "pong"
	}
	return 200, "hello from upstream"
}

// Upstream is the HTTP server both clusters point at in Envoy: answer's status and body,
// text/plain.
func Upstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		status, body := answer(r.URL.RequestURI())
		w.Header().Set("content-type", "text/plain")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

// requestHeaders are the headers the client sends, as the filter gets them from hostsim
// (Envoy's connection manager may add its own, which then show in the diff).
func (s Scenario) requestHeaders() [][2]string {
	h := [][2]string{{":authority", authority}, {":path", s.Path}, {":method", s.Method}, {":scheme", "http"},
		{"user-agent", userAgent}}
	if s.Body != "" {
		h = append(h, [2]string{"content-length", strconv.Itoa(len(s.Body))})
	}
	return h
}

func answerFor(path string) ([][2]string, []byte) {
	status, body := answer(path)
	return [][2]string{{":status", strconv.Itoa(status)}, {"content-type", "text/plain"},
		{"content-length", strconv.Itoa(len(body))}}, []byte(body)
}

// RunHostsim runs s in hostsim on the probe module (build/guests/probe.wasm): one worker,
// the plugin configured as Bootstrap configures it in Envoy, the upstream and the callout
// cluster answering as Upstream does.
func RunHostsim(probe []byte, s Scenario, opts ...hostsim.Option) (Trace, error) {
	all := append([]hostsim.Option{
		hostsim.WithPluginName(pluginName), hostsim.WithRootID(rootID),
		hostsim.WithPluginConfiguration([]byte(strings.TrimSpace(s.Script))),
		hostsim.WithoutAllowOnHeadersStopIteration(), // Bootstrap does not set it
		hostsim.WithCluster(upstreamCluster, calloutCluster),
		hostsim.WithUpstream(func(_ context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
			h, b := answerFor(header(r.Headers, ":path"))
			return &hostsim.UpstreamResponse{Headers: h, Body: b}, nil
		}),
		hostsim.WithCalloutHandler(func(_ context.Context, c *hostsim.Callout) *hostsim.CalloutResponse {
			h, b := answerFor(header(c.Headers, ":path"))
			return &hostsim.CalloutResponse{Headers: h, Body: b}
		}),
	}, opts...)
	h, err := hostsim.New(probe, all...)
	if err != nil {
		return Trace{}, fmt.Errorf("envoycheck: %s: %w", s.Name, err)
	}
	defer h.Close()
	if ok, err := h.StartPlugin(); !ok || err != nil {
		return Trace{}, fmt.Errorf("envoycheck: %s: the probe did not start: %v", s.Name, err)
	}
	if _, err := h.RunHTTP(context.Background(), &hostsim.Request{Headers: s.requestHeaders(), Body: []byte(s.Body)}); err != nil {
		return Trace{}, fmt.Errorf("envoycheck: %s: %w", s.Name, err)
	}
	return Trace{Scenario: s.Name, Source: "hostsim", Lines: FromHostsim(h.Logs())}, nil
}

func header(h [][2]string, k string) string {
	for _, kv := range h {
		if kv[0] == k {
			return kv[1]
		}
	}
	return ""
}
