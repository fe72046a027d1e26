package attributes

import (
	"bytes"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

func path(segs ...string) string {
	var b []byte
	for i, s := range segs {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, s...)
	}
	return string(b)
}

func TestGet(t *testing.T) {
	plugin := Plugin{Name: "spillway", RootID: "root", VMID: "vm"}
	stream := &Stream{
		RequestHeaders:  [][2]string{{":path", "/v1/chat?stream=1"}, {":authority", "api"}, {":method", "POST"}, {"x-request-id", "r1"}},
		ResponseHeaders: [][2]string{{":status", "503"}, {"x-a", "1"}},
		ResponseStarted: true,
		Flags:           streaminfo.FlagNoHealthyUpstream,
		Details:         "no_healthy_upstream",
		HasDetails:      true,
		FilterState:     map[string][]byte{"route_name": []byte("fs-route"), "my.state": []byte("v")},
	}
	host := func(p string) ([]byte, bool) {
		if p == path("xds", "cluster_name") || p == path("request", "time") {
			return []byte("from host"), true
		}
		return nil, false
	}
	for _, tc := range []struct {
		name   string
		path   string     // the property path
		s      *Stream    // the stream (nil: a root context)
		want   []byte     // the value
		status abi.Status // the status
	}{
		{"plugin name", path("plugin_name"), nil, []byte("spillway"), abi.StatusOK},
		{"url path", path("request", "url_path"), stream, []byte("/v1/chat"), abi.StatusOK},
		{"query", path("request", "query"), stream, []byte("stream=1"), abi.StatusOK},
		{"host", path("request", "host"), stream, []byte("api"), abi.StatusOK},
		{"one request header, any case", path("request", "headers", "X-Request-Id"), stream, []byte("r1"), abi.StatusOK},
		{"request attribute from the host", path("request", "time"), stream, []byte("from host"), abi.StatusOK},
		{"no stream info in a root context", path("request", "path"), nil, nil, abi.StatusNotFound},
		{"response code", path("response", "code"), stream, abi.PropertyUint64(503), abi.StatusOK},
		{"response flags", path("response", "flags"), stream, abi.PropertyUint64(uint64(streaminfo.FlagNoHealthyUpstream)), abi.StatusOK},
		{"code details", path("response", "code_details"), stream, []byte("no_healthy_upstream"), abi.StatusOK},
		{"flags before the response", path("response", "flags"), &Stream{}, abi.PropertyUint64(0), abi.StatusOK},
		{"code details unset", path("response", "code_details"), &Stream{}, nil, abi.StatusNotFound},
		{"response code before the response", path("response", "code"), &Stream{}, nil, abi.StatusNotFound},
		{"removed in 1.33, from filter state", path("route_name"), stream, []byte("fs-route"), abi.StatusOK},
		{"removed in 1.33", path("cluster_name"), stream, nil, abi.StatusNotFound},
		{"xds from the host", path("xds", "cluster_name"), nil, []byte("from host"), abi.StatusOK},
		{"filter state", path("my.state"), stream, []byte("v"), abi.StatusOK},
		{"unknown", path("nope"), stream, nil, abi.StatusNotFound},
		// The C++ SDK terminates every segment; Context::getProperty ignores the empty tail.
		{"trailing NUL", path("xds", "cluster_name") + "\x00", nil, []byte("from host"), abi.StatusOK},
		{"trailing NUL, plugin attribute", path("plugin_root_id") + "\x00", nil, []byte("root"), abi.StatusOK},
		{"trailing NUL, request attribute", path("request", "host") + "\x00", stream, []byte("api"), abi.StatusOK},
		{"two trailing NULs: an empty last segment", path("xds", "cluster_name") + "\x00\x00", nil, nil, abi.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, st := Get(tc.path, plugin, tc.s, host)
			if st != tc.status || !bytes.Equal(got, tc.want) {
				t.Fatalf("Get(%q) = %q, %v; want %q, %v", tc.path, got, st, tc.want, tc.status)
			}
		})
	}
	whole, st := Get(path("response", "headers"), plugin, stream, host)
	if kv, ok := abi.DecodePairs(whole); st != abi.StatusOK || !ok || len(kv) != 2 || kv[1] != [2]string{"x-a", "1"} {
		t.Fatalf("response.headers = %q (%v)", kv, st)
	}
}
