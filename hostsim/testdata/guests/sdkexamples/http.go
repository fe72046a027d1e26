package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// http_headers: the plugin configuration {"header": ..., "value": ...} names a response
// header to add; request headers get test: best and are logged ("request header --> k: v"),
// response headers get x-proxy-wasm-go-sdk-example: http_headers and the configured one, and
// are logged ("response header <-- k: v"); the stream's end logs "<id> finished".
type httpHeaders struct {
	types.DefaultPluginContext
	name, value string
}

func newHTTPHeaders(uint32) types.PluginContext { return &httpHeaders{} }

func (p *httpHeaders) OnPluginStart(int) types.OnPluginStartStatus {
	cfg := pluginConfig()
	if len(cfg) == 0 {
		return types.OnPluginStartStatusOK
	}
	var c struct{ Header, Value string }
	if err := json.Unmarshal(cfg, &c); err != nil {
		proxywasm.LogCriticalf(`invalid configuration %q; expected {"header": "<header name>", "value": "<header value>"}`, cfg)
		return types.OnPluginStartStatusFailed
	}
	p.name, p.value = strings.TrimSpace(c.Header), strings.TrimSpace(c.Value)
	if p.name == "" || p.value == "" {
		proxywasm.LogCritical(`expected {"header": "<header name>", "value": "<header value>"}`)
		return types.OnPluginStartStatusFailed
	}
	proxywasm.LogInfof("header from config: %s = %s", p.name, p.value)
	return types.OnPluginStartStatusOK
}

func (p *httpHeaders) NewHttpContext(id uint32) types.HttpContext {
	return &headersStream{plugin: p, id: id}
}

type headersStream struct {
	types.DefaultHttpContext
	plugin *httpHeaders
	id     uint32
}

func (c *headersStream) OnHttpRequestHeaders(int, bool) types.Action {
	if err := proxywasm.ReplaceHttpRequestHeader("test", "best"); err != nil {
		proxywasm.LogCriticalf("replace test: %v", err)
	}
	logHeaders("request header -->", proxywasm.GetHttpRequestHeaders)
	return types.ActionContinue
}

func (c *headersStream) OnHttpResponseHeaders(int, bool) types.Action {
	if err := proxywasm.AddHttpResponseHeader("x-proxy-wasm-go-sdk-example", "http_headers"); err != nil {
		proxywasm.LogCriticalf("add header: %v", err)
	}
	if c.plugin.name != "" {
		if err := proxywasm.AddHttpResponseHeader(c.plugin.name, c.plugin.value); err != nil {
			proxywasm.LogCriticalf("add %s: %v", c.plugin.name, err)
		}
	}
	logHeaders("response header <--", proxywasm.GetHttpResponseHeaders)
	return types.ActionContinue
}

func (c *headersStream) OnHttpStreamDone() { proxywasm.LogInfof("%d finished", c.id) }

func logHeaders(prefix string, get func() ([][2]string, error)) {
	hs, err := get()
	if err != nil {
		proxywasm.LogCriticalf("%s: %v", prefix, err)
	}
	for _, h := range hs {
		proxywasm.LogInfof("%s %s: %s", prefix, h[0], h[1])
	}
}

// http_auth_random: each request's headers go to the httpbin cluster in a callout while
// the request waits; the answer's headers are logged ("response header from httpbin:
// k: v"), and the FNV-1a hash of its body decides: even lets the request go on ("access
// granted"), odd answers 403 "access forbidden" with powered-by: proxy-wasm-go-sdk!!.
type authRandom struct{ types.DefaultPluginContext }

func newAuthRandom(uint32) types.PluginContext { return &authRandom{} }

func (*authRandom) NewHttpContext(uint32) types.HttpContext { return &authStream{} }

type authStream struct{ types.DefaultHttpContext }

func (*authStream) OnHttpRequestHeaders(int, bool) types.Action {
	hs, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		proxywasm.LogCriticalf("request headers: %v", err)
		return types.ActionContinue
	}
	if _, err := proxywasm.DispatchHttpCall("httpbin", hs, nil, nil, 50000, authAnswered); err != nil {
		proxywasm.LogCriticalf("dispatch httpcall failed: %v", err)
		return types.ActionContinue
	}
	return types.ActionPause
}

func authAnswered(_, bodySize, _ int) {
	hs, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		proxywasm.LogCriticalf("callout headers: %v", err)
		return
	}
	for _, h := range hs {
		proxywasm.LogInfof("response header from httpbin: %s: %s", h[0], h[1])
	}
	body, err := proxywasm.GetHttpCallResponseBody(0, bodySize)
	if err != nil {
		proxywasm.LogCriticalf("callout body: %v", err)
		_ = proxywasm.ResumeHttpRequest()
		return
	}
	h := fnv.New32a()
	h.Write(body)
	if h.Sum32()%2 == 0 {
		proxywasm.LogInfo("access granted")
		_ = proxywasm.ResumeHttpRequest()
		return
	}
	proxywasm.LogInfo("access forbidden")
	if err := proxywasm.SendHttpResponse(403, [][2]string{{"powered-by", "proxy-wasm-go-sdk!!"}},
		[]byte("access forbidden"), -1); err != nil {
		proxywasm.LogErrorf("local response: %v", err)
		_ = proxywasm.ResumeHttpRequest()
	}
}

// http_body: with the plugin configuration "echo", the whole request body is answered back
// as a 200 (the example's echo listener); otherwise the request's buffer-replace-at header
// (request or response) picks the body to change, and buffer-operation how (append,
// prepend, replace; anything else replaces), once the whole body is there; the original is
// logged ("original <request|response> body: ..."). A request without content-length is
// answered 400.
type httpBody struct {
	types.DefaultPluginContext
	echo bool
}

func newHTTPBody(uint32) types.PluginContext { return &httpBody{} }

func (p *httpBody) OnPluginStart(int) types.OnPluginStartStatus {
	p.echo = string(pluginConfig()) == "echo"
	return types.OnPluginStartStatusOK
}

func (p *httpBody) NewHttpContext(uint32) types.HttpContext {
	if p.echo {
		return &echoStream{}
	}
	return &bodyStream{}
}

type echoStream struct{ types.DefaultHttpContext }

func (*echoStream) OnHttpRequestBody(size int, eos bool) types.Action {
	if !eos {
		return types.ActionPause
	}
	body, err := proxywasm.GetHttpRequestBody(0, size)
	if err != nil {
		proxywasm.LogErrorf("request body: %v", err)
	}
	if err := proxywasm.SendHttpResponse(200, nil, body, -1); err != nil {
		proxywasm.LogErrorf("echo: %v", err)
	}
	return types.ActionPause
}

type bodyStream struct {
	types.DefaultHttpContext
	response bool   // change the response's body, not the request's
	op       string // append, prepend or replace
}

func (c *bodyStream) OnHttpRequestHeaders(int, bool) types.Action {
	if at, err := proxywasm.GetHttpRequestHeader("buffer-replace-at"); err == nil && at == "response" {
		c.response = true
	}
	if _, err := proxywasm.GetHttpRequestHeader("content-length"); err != nil {
		if err := proxywasm.SendHttpResponse(400, nil, []byte("content must be provided"), -1); err != nil {
			proxywasm.LogErrorf("local response: %v", err)
		}
		return types.ActionPause
	}
	// The body changes length: the upstream must not trust the client's.
	if err := proxywasm.RemoveHttpRequestHeader("content-length"); err != nil {
		proxywasm.LogErrorf("remove content-length: %v", err)
	}
	c.op, _ = proxywasm.GetHttpRequestHeader("buffer-operation")
	if c.op != "append" && c.op != "prepend" {
		c.op = "replace"
	}
	return types.ActionContinue
}

func (c *bodyStream) OnHttpRequestBody(size int, eos bool) types.Action {
	if c.response {
		return types.ActionContinue
	}
	if !eos {
		return types.ActionPause
	}
	c.change("request", size, proxywasm.GetHttpRequestBody, proxywasm.AppendHttpRequestBody,
		proxywasm.PrependHttpRequestBody, proxywasm.ReplaceHttpRequestBody)
	return types.ActionContinue
}

func (c *bodyStream) OnHttpResponseHeaders(int, bool) types.Action {
	if c.response {
		if err := proxywasm.RemoveHttpResponseHeader("content-length"); err != nil {
			proxywasm.LogErrorf("remove content-length: %v", err)
		}
	}
	return types.ActionContinue
}

func (c *bodyStream) OnHttpResponseBody(size int, eos bool) types.Action {
	if !c.response {
		return types.ActionContinue
	}
	if !eos {
		return types.ActionPause
	}
	c.change("response", size, proxywasm.GetHttpResponseBody, proxywasm.AppendHttpResponseBody,
		proxywasm.PrependHttpResponseBody, proxywasm.ReplaceHttpResponseBody)
	return types.ActionContinue
}

func (c *bodyStream) change(which string, size int, get func(int, int) ([]byte, error), appendB, prependB, replaceB func([]byte) error) {
	orig, err := get(0, size)
	if err != nil {
		proxywasm.LogErrorf("%s body: %v", which, err)
		return
	}
	proxywasm.LogInfof("original %s body: %s", which, orig)
	switch c.op {
	case "append":
		err = appendB([]byte("[this is appended body]"))
	case "prepend":
		err = prependB([]byte("[this is prepended body]"))
	default:
		err = replaceB([]byte("[this is replaced body]"))
	}
	if err != nil {
		proxywasm.LogErrorf("%s %s body: %v", c.op, which, err)
	}
}

// http_body_chunk: the request body is read chunk by chunk as it arrives (the part of the
// buffered body not read yet); a chunk containing "pattern" is answered 403 "pattern found
// in chunk: <n>", otherwise the request goes on once the body ends.
type bodyChunk struct{ types.DefaultPluginContext }

func newBodyChunk(uint32) types.PluginContext { return &bodyChunk{} }

func (*bodyChunk) NewHttpContext(uint32) types.HttpContext { return &chunkStream{} }

type chunkStream struct {
	types.DefaultHttpContext
	read, chunks int
}

func (c *chunkStream) OnHttpRequestBody(size int, eos bool) types.Action {
	if n := size - c.read; n > 0 {
		chunk, err := proxywasm.GetHttpRequestBody(c.read, n)
		if err != nil {
			proxywasm.LogCriticalf("request body: %v", err)
			return types.ActionContinue
		}
		c.chunks++
		c.read += len(chunk)
		proxywasm.LogInfof("read chunk size: %d", len(chunk))
		if strings.Contains(string(chunk), "pattern") {
			msg := fmt.Sprintf("pattern found in chunk: %d", c.chunks)
			proxywasm.LogInfo(msg)
			if err := proxywasm.SendHttpResponse(403, [][2]string{{"powered-by", "proxy-wasm-go-sdk"}}, []byte(msg), -1); err != nil {
				proxywasm.LogCriticalf("local response: %v", err)
				_ = proxywasm.ResumeHttpRequest()
			}
			return types.ActionPause
		}
	}
	if !eos {
		return types.ActionPause
	}
	proxywasm.LogInfo("pattern not found")
	return types.ActionContinue
}

// http_routing: about half the requests (a random draw; the plugin configuration's first
// byte, when there is one, replaces it) get "-canary" appended to :authority, which the
// route sends to the canary cluster.
type httpRouting struct {
	types.DefaultPluginContext
	dice uint32
}

func newHTTPRouting(uint32) types.PluginContext { return &httpRouting{} }

func (p *httpRouting) OnPluginStart(int) types.OnPluginStartStatus {
	if cfg := pluginConfig(); len(cfg) > 0 {
		p.dice = uint32(cfg[0])
	}
	return types.OnPluginStartStatusOK
}

func (p *httpRouting) NewHttpContext(uint32) types.HttpContext { return &routingStream{dice: p.dice} }

type routingStream struct {
	types.DefaultHttpContext
	dice uint32
}

func (c *routingStream) OnHttpRequestHeaders(int, bool) types.Action {
	v := c.dice
	if v == 0 {
		v = randUint32()
	}
	if v%2 != 0 {
		return types.ActionContinue
	}
	authority, err := proxywasm.GetHttpRequestHeader(":authority")
	if err != nil {
		proxywasm.LogCritical("failed to get request header: ':authority'")
		return types.ActionPause
	}
	if err := proxywasm.ReplaceHttpRequestHeader(":authority", authority+"-canary"); err != nil {
		proxywasm.LogCriticalf("replace :authority: %v", err)
		return types.ActionPause
	}
	return types.ActionContinue
}

// json_validation: the plugin configuration {"requiredKeys": [...]} lists the keys a
// request's JSON body must have; a request that is not application/json is answered 403
// "content-type must be provided", one whose body is not a JSON object with every key 403
// "invalid payload".
type jsonValidation struct {
	types.DefaultPluginContext
	required []string
}

func newJSONValidation(uint32) types.PluginContext { return &jsonValidation{} }

func (p *jsonValidation) OnPluginStart(int) types.OnPluginStartStatus {
	cfg := pluginConfig()
	if len(cfg) == 0 {
		return types.OnPluginStartStatusOK
	}
	var c struct {
		RequiredKeys []string `json:"requiredKeys"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		proxywasm.LogCriticalf("the plugin configuration is not valid JSON: %q", cfg)
		return types.OnPluginStartStatusFailed
	}
	p.required = c.RequiredKeys
	return types.OnPluginStartStatusOK
}

func (p *jsonValidation) NewHttpContext(uint32) types.HttpContext {
	return &validatingStream{required: p.required}
}

type validatingStream struct {
	types.DefaultHttpContext
	required []string
}

func (*validatingStream) OnHttpRequestHeaders(int, bool) types.Action {
	if ct, err := proxywasm.GetHttpRequestHeader("content-type"); err != nil || ct != "application/json" {
		if err := proxywasm.SendHttpResponse(403, nil, []byte("content-type must be provided"), -1); err != nil {
			proxywasm.LogErrorf("local response: %v", err)
		}
		return types.ActionPause
	}
	return types.ActionContinue
}

func (c *validatingStream) OnHttpRequestBody(size int, eos bool) types.Action {
	if !eos {
		return types.ActionPause
	}
	body, err := proxywasm.GetHttpRequestBody(0, size)
	if err != nil {
		proxywasm.LogErrorf("request body: %v", err)
		return types.ActionContinue
	}
	var obj map[string]json.RawMessage
	ok := json.Unmarshal(body, &obj) == nil
	for _, k := range c.required {
		if _, has := obj[k]; !has {
			ok = false
		}
	}
	if !ok {
		proxywasm.LogErrorf("invalid payload: %q", body)
		if err := proxywasm.SendHttpResponse(403, nil, []byte("invalid payload"), -1); err != nil {
			proxywasm.LogErrorf("local response: %v", err)
		}
		return types.ActionPause
	}
	return types.ActionContinue
}

// metrics: a counter per value of the request's my-custom-header, named so that the
// example's stats tag rules read it as custom_header_value_counts{value=...,reporter=wasmgosdk}.
type metrics struct {
	types.DefaultPluginContext
	counters map[string]proxywasm.MetricCounter
}

func newMetrics(uint32) types.PluginContext {
	return &metrics{counters: map[string]proxywasm.MetricCounter{}}
}

func (p *metrics) NewHttpContext(uint32) types.HttpContext { return &metricStream{plugin: p} }

type metricStream struct {
	types.DefaultHttpContext
	plugin *metrics
}

func (c *metricStream) OnHttpRequestHeaders(int, bool) types.Action {
	v, err := proxywasm.GetHttpRequestHeader("my-custom-header")
	if err != nil {
		return types.ActionContinue
	}
	m, ok := c.plugin.counters[v]
	if !ok {
		m = proxywasm.DefineCounterMetric("custom_header_value_counts_value=" + v + "_reporter=wasmgosdk")
		c.plugin.counters[v] = m
	}
	m.Increment(1)
	return types.ActionContinue
}

// multiple_dispatches: at the response headers, ten callouts to httpbin (with an empty
// :authority) while the response waits; each answer logs how many are left, and the last
// adds total-dispatched: 10 and lets the response go on.
type multipleDispatches struct{ types.DefaultPluginContext }

func newMultipleDispatches(uint32) types.PluginContext { return &multipleDispatches{} }

func (*multipleDispatches) NewHttpContext(uint32) types.HttpContext { return &dispatchingStream{} }

const dispatches = 10

type dispatchingStream struct {
	types.DefaultHttpContext
	pending int
}

func (c *dispatchingStream) OnHttpResponseHeaders(int, bool) types.Action {
	for i := 0; i < dispatches; i++ {
		hs := [][2]string{{":path", "/"}, {":method", "GET"}, {":authority", ""}}
		if _, err := proxywasm.DispatchHttpCall("httpbin", hs, nil, nil, 50000, c.answered); err != nil {
			panic(err) // as the example: a refused callout kills the VM
		}
		c.pending++
	}
	return types.ActionPause
}

func (c *dispatchingStream) answered(int, int, int) {
	c.pending--
	if c.pending > 0 {
		proxywasm.LogInfof("pending dispatched requests: %d", c.pending)
		return
	}
	_ = proxywasm.AddHttpResponseHeader("total-dispatched", strconv.Itoa(dispatches))
	_ = proxywasm.ResumeHttpResponse()
	proxywasm.LogInfof("response resumed after processed %d dispatched request", dispatches)
}

// properties: the route's metadata names the header a request must carry
// (xds.route_metadata.filter_metadata."envoy.filters.http.wasm".auth; the example reads the
// top-level route_metadata, which Envoy 1.33 removed); without it 401, with it the request
// goes on; a route without the metadata lets every request go on.
type properties struct{ types.DefaultPluginContext }

func newProperties(uint32) types.PluginContext { return &properties{} }

func (*properties) NewHttpContext(id uint32) types.HttpContext { return &propertyStream{id: id} }

type propertyStream struct {
	types.DefaultHttpContext
	id uint32
}

// authPath is where the route's metadata keeps the header name.
var authPath = []string{"xds", "route_metadata", "filter_metadata", "envoy.filters.http.wasm", "auth"}

func (c *propertyStream) OnHttpRequestHeaders(int, bool) types.Action {
	auth, err := proxywasm.GetProperty(authPath)
	if err == types.ErrorStatusNotFound {
		proxywasm.LogInfo("no auth header for route")
		return types.ActionContinue
	} else if err != nil {
		proxywasm.LogCriticalf("failed to read properties: %v", err)
	}
	proxywasm.LogInfof("auth header is %q", auth)
	if _, err := proxywasm.GetHttpRequestHeader(string(auth)); err != nil {
		_ = proxywasm.SendHttpResponse(401, nil, nil, 16)
		return types.ActionPause
	}
	return types.ActionContinue
}

func (c *propertyStream) OnHttpStreamDone() { proxywasm.LogInfof("%d finished", c.id) }
