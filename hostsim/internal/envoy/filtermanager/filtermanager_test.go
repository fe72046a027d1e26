package filtermanager

import (
	"reflect"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

func TestHeaders(t *testing.T) {
	for _, tc := range []struct {
		raw       uint64         // the callback's return value
		forceStop bool           // a local reply from the callback
		allow     bool           // allow_on_headers_stop_iteration
		want      HeadersVerdict // what the filter manager does
	}{
		{0, false, false, HeadersContinue},
		{2, false, true, HeadersContinue}, // ContinueAndEndStream: unknown, continues
		{1, false, false, HeadersStopAll},
		{1, false, true, HeadersStopIteration},
		{1, true, true, HeadersStopAll}, // a local reply stops all
		{0, true, true, HeadersStopAll},
		{3, false, true, HeadersStopAll},
		{4, false, true, HeadersStopAll},
	} {
		if got := Headers(tc.raw, tc.forceStop, tc.allow); got != tc.want {
			t.Errorf("Headers(%d, forceStop %v, allow %v) = %v, want %v", tc.raw, tc.forceStop, tc.allow, got, tc.want)
		}
	}
}

func TestDataAndTrailers(t *testing.T) {
	for _, tc := range []struct {
		raw       uint64      // the callback's return value
		forceStop bool        // a local reply from the callback
		want      DataVerdict // what the filter manager does with the body
		trailers  bool        // whether trailers with that status go on
	}{
		{0, false, DataContinue, true},
		{0, true, DataStopAndBuffer, false},
		{1, false, DataStopAndBuffer, false},
		{2, false, DataStopAndBuffer, false},
		{3, false, DataStopNoBuffer, false},
		{4, false, DataStopNoBuffer, false},
		{3, true, DataStopAndBuffer, false},
	} {
		if got := Data(tc.raw, tc.forceStop); got != tc.want {
			t.Errorf("Data(%d, %v) = %v, want %v", tc.raw, tc.forceStop, got, tc.want)
		}
		if got := Trailers(tc.raw, tc.forceStop); got != tc.trailers {
			t.Errorf("Trailers(%d, %v) = %v, want %v", tc.raw, tc.forceStop, got, tc.trailers)
		}
	}
}

func TestReplyHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		lr   *LocalReply // the reply
		want [][2]string // its headers
	}{
		{"no body", &LocalReply{StatusCode: 204, Headers: [][2]string{{"X-A", "1"}}},
			[][2]string{{":status", "204"}, {"x-a", "1"}}},
		{"body", RequestTooLarge(),
			[][2]string{{":status", "413"}, {"content-length", "17"}, {"content-type", "text/plain"}}},
		{"own content type and a wrong length", &LocalReply{StatusCode: 429, Data: []byte("{}"),
			Headers: [][2]string{{"Content-Type", "application/json"}, {"content-length", "9"}}},
			[][2]string{{":status", "429"}, {"content-type", "application/json"}, {"content-length", "2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReplyHeaders(tc.lr); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ReplyHeaders = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDownstreamResets(t *testing.T) {
	for _, tc := range []struct {
		details string          // what the caller gave
		want    DownstreamReset // what Envoy records
		label   string          // what the stream reports as its reset
	}{
		{"", DownstreamReset{streaminfo.FlagDownstreamConnectionTermination, "downstream_remote_disconnect"}, "downstream_remote_disconnect"},
		{"downstream_remote_disconnect", DownstreamDisconnect, "downstream_remote_disconnect"},
		{"front end gave up", DownstreamReset{Details: "front end gave up"}, "front end gave up"},
	} {
		got := DownstreamResetFor(tc.details)
		if got != tc.want || ResetLabel(got) != tc.label {
			t.Errorf("DownstreamResetFor(%q) = %+v (label %q), want %+v (%q)", tc.details, got, ResetLabel(got), tc.want, tc.label)
		}
	}
	if l := ResetLabel(DownstreamStreamReset); l != "downstream_remote_reset" {
		t.Errorf("an RST_STREAM reports %q", l)
	}
}
