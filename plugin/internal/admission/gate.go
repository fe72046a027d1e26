package admission

import (
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// GateConfig is the resolved admission setting of one provider connection.
type GateConfig struct {
	Provider   string // provider id
	Connection string // connection id
	// Account is the connection's upstream account (a state.AccountID): its lease record is
	// shared by every policy on that credential. "" means a connection without a credential:
	// state.LocalAccountID of Namespace, Provider and Connection.
	Account string
	// Namespace is the policy's state.NamespaceID: its tickets and pools are its own.
	Namespace string
	// GlobalMaxConcurrent caps requests in flight over every gate that sets it (0 = none).
	GlobalMaxConcurrent int
	// ProviderMaxConcurrent caps requests in flight to the provider (0 = none).
	ProviderMaxConcurrent int
	// MaxConcurrent is the connection's cap (maxConcurrent; 0 = none).
	MaxConcurrent int
	// ModelConcurrency caps requests per exact upstream model id on this connection
	// (modelConcurrency); values are positive.
	ModelConcurrency map[string]int
	// Queue is the connection's resolved request-queue setting (see QueueConfigFrom).
	Queue QueueConfig
	// QuotaShareFailOpen makes the connection's cap fail-open (guide §4 "Serialisatie van
	// quota-share-requests", resilience.quotaShareConcurrencyLimit): a request whose wait for
	// a connection slot ends — the queue is full, or its wait budget runs out — is granted
	// without a slot (Result.FailedOpen) instead of RATE_LIMIT_QUEUE_FULL /
	// RATE_LIMIT_QUEUE_TIMEOUT. The per-model gate never fails open.
	QuotaShareFailOpen bool
}

// Gate is one connection's compound gate (global → provider → connection → model), built
// once per policy so no key is rebuilt per request. It is read-only and may be shared.
type Gate struct {
	provider, connection string
	// The records of the gate's caps (keys.go) and the gate's id in wake-ups (a hash of
	// its lease key, never 0).
	globalKey, providerKey, leaseKey, ticketKey string
	id                                          uint64
	ns                                          uint64 // hash of the namespace (waitCount.ns)
	globalCap, providerCap, connCap             int
	models                                      []modelLimit
	queue                                       QueueConfig
	executionMaxWaitMs, maxWaitMs               int64
	failOpen                                    bool
}

type modelLimit struct {
	name string
	hash uint64
	cap  int
}

// NewGate validates cfg and builds the gate. Caps must be 0–MaxCap (model caps 1–MaxCap);
// the queue setting is clamped.
func NewGate(cfg GateConfig) (*Gate, error) {
	var errs []error
	if cfg.Provider == "" || cfg.Connection == "" {
		errs = append(errs, errors.New("admission: provider and connection ids are required"))
	}
	checkCap := func(name string, v, lo int) {
		if v < lo || v > MaxCap {
			errs = append(errs, fmt.Errorf("admission: %s/%s: %s=%d, want %d–%d", cfg.Provider, cfg.Connection, name, v, lo, MaxCap))
		}
	}
	checkCap("globalMaxConcurrent", cfg.GlobalMaxConcurrent, 0)
	checkCap("providerMaxConcurrent", cfg.ProviderMaxConcurrent, 0)
	checkCap("maxConcurrent", cfg.MaxConcurrent, 0)
	account := cfg.Account
	if account == "" {
		account = state.LocalAccountID(cfg.Namespace, cfg.Provider, cfg.Connection)
	}
	g := &Gate{
		provider:    cfg.Provider,
		connection:  cfg.Connection,
		globalKey:   globalPoolKey(cfg.Namespace),
		providerKey: providerPoolKey(cfg.Namespace, cfg.Provider),
		leaseKey:    leaseKey(account),
		ticketKey:   ticketKey(cfg.Namespace, account),
		ns:          hashModel(cfg.Namespace),
		globalCap:   cfg.GlobalMaxConcurrent,
		providerCap: cfg.ProviderMaxConcurrent,
		connCap:     cfg.MaxConcurrent,
		queue:       cfg.Queue.Normalize(),
		failOpen:    cfg.QuotaShareFailOpen,
	}
	for name, c := range cfg.ModelConcurrency {
		if name == "" {
			errs = append(errs, fmt.Errorf("admission: %s/%s: modelConcurrency has an empty model id", cfg.Provider, cfg.Connection))
			continue
		}
		checkCap("modelConcurrency["+strconv.Quote(name)+"]", c, 1)
		g.models = append(g.models, modelLimit{name: name, hash: hashModel(name), cap: c})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.Slice(g.models, func(i, j int) bool { return g.models[i].name < g.models[j].name })
	g.id = hashModel(g.leaseKey) | 1
	g.executionMaxWaitMs = g.queue.ExecutionMaxWait.Milliseconds()
	g.maxWaitMs = g.queue.MaxWait.Milliseconds()
	return g, nil
}

// Provider returns the gate's provider id.
func (g *Gate) Provider() string { return g.provider }

// Connection returns the gate's connection id.
func (g *Gate) Connection() string { return g.connection }

// Queue returns the gate's clamped queue setting.
func (g *Gate) Queue() QueueConfig { return g.queue }

// ModelCap returns the cap on model (an exact upstream model id; no alias matching), or 0.
func (g *Gate) ModelCap(model string) int {
	for i := range g.models {
		if g.models[i].name == model {
			return g.models[i].cap
		}
	}
	return 0
}

// Limited reports whether a request for model goes through admission at all. When no cap
// applies it does not, and Admit touches no shared data.
func (g *Gate) Limited(model string) bool { return g.limited(g.ModelCap(model)) }

// limited is Limited for a model whose cap on g is modelCap.
func (g *Gate) limited(modelCap int) bool {
	return g.globalCap > 0 || g.providerCap > 0 || g.connCap > 0 || modelCap > 0
}

// ID identifies the gate in wake-ups (Wake.Gate): a hash of its lease record's key, so the
// same on every VM and every plugin, whatever its policy, for the same upstream account — a
// release on the shared record wakes every policy's waiters for it.
func (g *Gate) ID() uint64 { return g.id }

// window is how many of a line's first waiters can be granted before a later ticket of any
// line, so how many the line publishes: its cap (the connection's, or the model's when
// stricter; with no connection cap only tickets of the same model compete, up to the
// model's cap). A line under the global or provider cap alone has no FIFO order (the pools
// grant whoever asks) and publishes nothing.
func (g *Gate) window(modelCap int) int {
	switch {
	case g.connCap > 0 && modelCap > 0:
		return min(g.connCap, modelCap)
	case g.connCap > 0:
		return g.connCap
	}
	return modelCap
}

// String names the gate in errors and logs.
func (g *Gate) String() string { return g.provider + "/" + g.connection }

func (g *Gate) hasUpper() bool { return g.globalCap > 0 || g.providerCap > 0 }

// modelLimit returns model's hash and cap.
func (g *Gate) modelLimit(model string) (uint64, int) {
	for i := range g.models {
		if g.models[i].name == model {
			return g.models[i].hash, g.models[i].cap
		}
	}
	return hashModel(model), 0
}
