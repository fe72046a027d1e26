package admission

import (
	"time"

	"github.com/spillwayproxy/spillway/policies"
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
	// MaxQueueDepth is how many requests may wait at once, across workers; 0 = unbounded.
	MaxQueueDepth int
}

// QueueConfigFrom converts a connection's resolved queue budgets (policies.ResolvedConnection,
// where the environment, policy and per-connection layers are already folded in) into a
// QueueConfig.
func QueueConfigFrom(c *policies.ResolvedConnection) QueueConfig {
	return QueueConfig{MaxWait: c.QueueMaxWait, ExecutionMaxWait: c.ExecutionMaxWait, MaxQueueDepth: c.MaxQueueDepth}
}

// GateConfigFrom converts a resolved connection of the given provider, in the resolved
// policy res, into its gate setting: the one conversion from policy settings to admission.
// The policy has no global or provider-wide caps, so those stay 0 (none).
func GateConfigFrom(res *policies.Resolved, provider string, c *policies.ResolvedConnection) GateConfig {
	return GateConfig{Provider: provider, Connection: c.ID, MaxConcurrent: c.MaxConcurrent,
		ModelConcurrency: c.ModelConcurrency, Queue: QueueConfigFrom(c),
		QuotaShareFailOpen: res.QuotaShareConcurrencyLimitEnabled}
}

// DefaultQueueConfig returns the guide's defaults (§5): 30 s wait budget, 10 min execution
// limit, unbounded queue. A policy's connection gets a bounded depth by default instead
// (policies.DefaultMaxQueueDepth, resolved into policies.ResolvedConnection.MaxQueueDepth).
func DefaultQueueConfig() QueueConfig {
	return QueueConfig{MaxWait: policies.RequestQueueMaxWait, ExecutionMaxWait: policies.RequestQueueExecutionMaxWait}
}

// Normalize clamps the waits to 1 ms–24 h and the depth to 0–100000, as the guide's
// normalisation does (§5).
func (c QueueConfig) Normalize() QueueConfig {
	c.MaxWait = clampDuration(c.MaxWait)
	c.ExecutionMaxWait = clampDuration(c.ExecutionMaxWait)
	c.MaxQueueDepth = int(clampInt(int64(c.MaxQueueDepth), 0, policies.RequestQueueMaxDepthCap))
	return c
}

func clampDuration(d time.Duration) time.Duration {
	return time.Duration(clampInt(int64(d), int64(policies.RequestQueueMinWait), int64(policies.RequestQueueMaxWaitCap)))
}

func clampInt(v, lo, hi int64) int64 {
	return min(max(v, lo), hi)
}
