//go:build !wasip1

package hostabi

import (
	"errors"
	"strings"
	"time"

	"github.com/spillwayproxy/spillway/internal/pairs"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
)

// Natively (tests under the SDK's proxytest) every call goes through the SDK.

// ReadPairs reads header map m into p.
func ReadPairs(m MapType, p *Pairs) error {
	var kv [][2]string
	var err error
	switch m {
	case RequestHeaders:
		kv, err = proxywasm.GetHttpRequestHeaders()
	case ResponseHeaders:
		kv, err = proxywasm.GetHttpResponseHeaders()
	case RequestTrailers:
		kv, err = proxywasm.GetHttpRequestTrailers()
	case ResponseTrailers:
		kv, err = proxywasm.GetHttpResponseTrailers()
	case HTTPCallResponseHeaders:
		kv, err = proxywasm.GetHttpCallResponseHeaders()
	default:
		return errUnknownStatus
	}
	if err != nil {
		p.Reset()
		return err
	}
	// Envoy keeps names lower case; proxytest keeps what the test passed.
	for i := range kv {
		kv[i][0] = strings.ToLower(kv[i][0])
	}
	p.setFrom(pairs.Append(nil, kv))
	return nil
}

// ReplaceHeader sets name to value in map m.
func ReplaceHeader(m MapType, name, value string) error {
	switch m {
	case RequestHeaders:
		return proxywasm.ReplaceHttpRequestHeader(name, value)
	case ResponseHeaders:
		return proxywasm.ReplaceHttpResponseHeader(name, value)
	}
	return errUnknownStatus
}

// RemoveHeader removes every value of name from map m.
func RemoveHeader(m MapType, name string) error {
	switch m {
	case RequestHeaders:
		return proxywasm.RemoveHttpRequestHeader(name)
	case ResponseHeaders:
		return proxywasm.RemoveHttpResponseHeader(name)
	}
	return errUnknownStatus
}

// ReadBuffer copies up to max bytes of buffer b from start into dst.
func ReadBuffer(b BufferType, start, max int, dst []byte) ([]byte, error) {
	var data []byte
	var err error
	switch b {
	case RequestBody:
		data, err = proxywasm.GetHttpRequestBody(start, max)
	case ResponseBody:
		data, err = proxywasm.GetHttpResponseBody(start, max)
	case HTTPCallResponseBody:
		data, err = proxywasm.GetHttpCallResponseBody(start, max)
	default:
		return dst[:0], errUnknownStatus
	}
	if err != nil {
		return dst[:0], err
	}
	return append(dst[:0], data...), nil
}

// ReplaceBuffer replaces buffer b with data.
func ReplaceBuffer(b BufferType, data []byte) error {
	switch b {
	case RequestBody:
		return proxywasm.ReplaceHttpRequestBody(data)
	case ResponseBody:
		return proxywasm.ReplaceHttpResponseBody(data)
	}
	return errUnknownStatus
}

// GetSharedData reads key into dst.
func GetSharedData(key string, dst []byte) ([]byte, uint32, error) {
	v, cas, err := proxywasm.GetSharedData(key)
	if err != nil {
		return dst[:0], 0, err
	}
	return append(dst[:0], v...), cas, nil
}

// SetSharedData stores value under key if cas is 0 or matches.
func SetSharedData(key string, value []byte, cas uint32) error {
	return proxywasm.SetSharedData(key, value, cas)
}

// GetProperty reads a property (segments joined by NUL) into dst.
func GetProperty(path []byte, dst []byte) ([]byte, error) {
	v, err := proxywasm.GetProperty(strings.Split(string(path), "\x00"))
	if err != nil {
		return dst[:0], err
	}
	return append(dst[:0], v...), nil
}

// SetProperty writes a property (segments joined by NUL): filter state under "wasm." + the
// path in Envoy.
func SetProperty(path []byte, value string) error {
	return proxywasm.SetProperty(strings.Split(string(path), "\x00"), []byte(value))
}

// SetPropertyBytes is SetProperty with the value in a byte slice.
func SetPropertyBytes(path, value []byte) error {
	return proxywasm.SetProperty(strings.Split(string(path), "\x00"), value)
}

// SendLocalResponse sends a local reply (the SDK's call has no details).
func SendLocalResponse(status uint32, _ string, body []byte, headers [][2]string, _ *[]byte) error {
	return proxywasm.SendHttpResponse(status, headers, body, -1)
}

// ContinueStream resumes a paused direction.
func ContinueStream(s StreamType) error {
	if s == StreamResponse {
		return proxywasm.ResumeHttpResponse()
	}
	return proxywasm.ResumeHttpRequest()
}

// errNoCloseStream: the SDK exposes proxy_close_stream for TCP streams only.
var errNoCloseStream = errors.New("hostabi: the SDK has no proxy_close_stream for an HTTP stream")

// CloseStream would reset the stream: the SDK has no call for it, so natively it reports
// errNoCloseStream (the SDK's proxytest host does not model a reset either).
func CloseStream(StreamType) error { return errNoCloseStream }

// IncrementMetric adds delta to a counter.
func IncrementMetric(id uint32, delta int64) error {
	proxywasm.MetricCounter(id).Increment(uint64(delta))
	return nil
}

// Log writes message at level.
func Log(level LogLevel, message []byte) error {
	switch level {
	case LogDebug:
		proxywasm.LogDebug(string(message))
	case LogInfo:
		proxywasm.LogInfo(string(message))
	default:
		proxywasm.LogWarn(string(message))
	}
	return nil
}

// SetGauge sets a gauge to v with proxy_record_metric, which sets a gauge (the SDK only
// offers it on its histogram type; the host looks at the id, not the Go type).
func SetGauge(id uint32, v uint64) error {
	proxywasm.MetricHistogram(id).Record(v)
	return nil
}

// Now is the wall clock.
func Now() time.Time { return time.Now() }
