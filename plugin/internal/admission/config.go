package admission

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// Environment variables that supply the request queue's defaults (guide §5). A policy value
// overrides them, and a per-connection override overrides the policy.
const (
	EnvMaxWait          = "RATE_LIMIT_MAX_WAIT_MS"
	EnvExecutionMaxWait = "RATE_LIMIT_EXECUTION_MAX_WAIT_MS"
	EnvMaxQueueDepth    = "RATE_LIMIT_MAX_QUEUE_DEPTH"
)

// MaxCap bounds every concurrency cap. A lease record holds at most cap leases, so the
// bound keeps a misconfigured cap from making huge shared-data records.
const MaxCap = 100000

// QueueConfig is the resolved request-queue setting of one connection.
type QueueConfig struct {
	// MaxWait is the queue wait budget (maxWaitMs): how long a request may wait for a
	// slot. A request that runs out of it never reaches the upstream.
	MaxWait time.Duration
	// ExecutionMaxWait bounds a request after dispatch (executionMaxWaitMs); it is also
	// the lifetime of the request's lease, so a slot held by a dead worker comes back.
	ExecutionMaxWait time.Duration
	// MaxQueueDepth is how many requests may wait at once; 0 = unbounded.
	MaxQueueDepth int
}

// DefaultQueueConfig returns the guide's defaults: 30 s wait budget, 10 min execution
// limit, unbounded queue.
func DefaultQueueConfig() QueueConfig {
	return QueueConfig{
		MaxWait:          policies.RequestQueueMaxWait,
		ExecutionMaxWait: policies.RequestQueueExecutionMaxWait,
		MaxQueueDepth:    policies.RequestQueueMaxDepth,
	}
}

// Normalize clamps the waits to 1 ms–24 h and the depth to 0–100000, as the guide's
// normalisation does.
func (c QueueConfig) Normalize() QueueConfig {
	c.MaxWait = clampDuration(c.MaxWait)
	c.ExecutionMaxWait = clampDuration(c.ExecutionMaxWait)
	c.MaxQueueDepth = int(clampInt(int64(c.MaxQueueDepth), 0, policies.RequestQueueMaxDepthCap))
	return c
}

// QueueLayer is one precedence layer of request-queue settings, in the units the policy and
// the environment use. A nil field is not set at this layer.
type QueueLayer struct {
	MaxWaitMs          *int64 // maxWaitMs
	ExecutionMaxWaitMs *int64 // executionMaxWaitMs
	MaxQueueDepth      *int64 // maxQueueDepth
}

// ResolveQueue applies the layers over the guide's defaults, lowest precedence first: the
// environment supplies only the default, a policy value overrides it, and a per-connection
// override (rateLimitOverrides) overrides both. The result is clamped.
func ResolveQueue(env, policy, connection QueueLayer) QueueConfig {
	c := DefaultQueueConfig()
	for _, l := range [...]QueueLayer{env, policy, connection} {
		if l.MaxWaitMs != nil {
			c.MaxWait = millis(*l.MaxWaitMs)
		}
		if l.ExecutionMaxWaitMs != nil {
			c.ExecutionMaxWait = millis(*l.ExecutionMaxWaitMs)
		}
		if l.MaxQueueDepth != nil {
			c.MaxQueueDepth = int(clampInt(*l.MaxQueueDepth, 0, policies.RequestQueueMaxDepthCap))
		}
	}
	return c.Normalize()
}

// EnvQueueLayer reads the queue defaults from the VM environment (lookup is os.LookupEnv or
// the plugin's environment map). An empty variable is unset. A value that is not an integer
// is left unset and reported; the valid ones are still returned.
func EnvQueueLayer(lookup func(string) (string, bool)) (QueueLayer, error) {
	var l QueueLayer
	var errs []error
	read := func(name string, dst **int64) {
		raw, ok := lookup(name)
		raw = strings.TrimSpace(raw)
		if !ok || raw == "" {
			return
		}
		v, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("admission: %s=%q is not an integer: %w", name, raw, err))
			return
		}
		*dst = &v
	}
	read(EnvMaxWait, &l.MaxWaitMs)
	read(EnvExecutionMaxWait, &l.ExecutionMaxWaitMs)
	read(EnvMaxQueueDepth, &l.MaxQueueDepth)
	return l, errors.Join(errs...)
}

// millis converts a millisecond setting to a duration without overflow; Normalize clamps it.
func millis(ms int64) time.Duration {
	const maxMs = int64(policies.RequestQueueMaxWaitCap / time.Millisecond)
	return time.Duration(clampInt(ms, 0, maxMs+1)) * time.Millisecond
}

func clampDuration(d time.Duration) time.Duration {
	return time.Duration(clampInt(int64(d), int64(policies.RequestQueueMinWait), int64(policies.RequestQueueMaxWaitCap)))
}

func clampInt(v, lo, hi int64) int64 {
	return min(max(v, lo), hi)
}
