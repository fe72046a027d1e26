package envoylimits_test

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies/envoylimits"
)

func TestRetryNumRetries(t *testing.T) {
	tests := []struct {
		name   string
		policy string // appended to base
		want   uint32 // the routed route's num_retries
	}{
		// The default three attempts: the first try and two retries.
		{"default", "", 2},
		// One attempt: no retry (the marker is never honoured).
		{"one attempt", "resilience: {failover: {maxAttempts: 1}}", 0},
		// The most attempts a policy may set.
		{"twenty attempts", "resilience: {failover: {maxAttempts: 20}}", 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := envoylimits.RetryNumRetries(resolve(t, base+tt.policy)); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestRetryBufferLimit(t *testing.T) {
	tests := []struct {
		name   string
		policy string // appended to base
		want   uint64 // the routed route's request_body_buffer_limit
	}{
		// Twice the default request limit (8 MiB + 1 MiB): Envoy counts a body a filter
		// resumed twice (envoyproxy/envoy#30613).
		{"default", "", 2 * (8<<20 + 1<<20)},
		// The largest policy limit (256 MiB) doubles too.
		{"largest", "maxRequestBodyBytes: 268435456", 2 * (256<<20 + 1<<20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := resolve(t, base+tt.policy)
			got := envoylimits.RetryBufferLimit(res)
			if got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
			if got != 2*envoylimits.RequestBodyBufferLimit(res) {
				t.Errorf("%d: want twice the request limit %d", got, envoylimits.RequestBodyBufferLimit(res))
			}
		})
	}
}

func TestRetryConstants(t *testing.T) {
	// Envoy's defaults would refuse most failovers of an outage (3 outstanding retries) and
	// delay each retry by up to 25 ms; the values must stay above and below them.
	if envoylimits.ClusterMaxRetries <= 3 {
		t.Errorf("ClusterMaxRetries %d is no higher than Envoy's default of 3", envoylimits.ClusterMaxRetries)
	}
	// Envoy rounds a base below 1 ms up to 1 ms: a smaller value would not be what runs.
	if envoylimits.RetryBackOffBase != time.Millisecond || envoylimits.RetryBackOffMax < envoylimits.RetryBackOffBase ||
		envoylimits.RetryBackOffMax >= 25*time.Millisecond {
		t.Errorf("back-off %v–%v: want a 1 ms base and a max at or above it, below Envoy's 25 ms default base",
			envoylimits.RetryBackOffBase, envoylimits.RetryBackOffMax)
	}
}
