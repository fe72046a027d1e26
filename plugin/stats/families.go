package stats

// The metric families the filter defines. Counters count in each worker VM's memory and
// reach Envoy on the VM's next tick (at most about a second later); gauges are read from
// the state every worker shares and published by one VM about once a second.
var (
	// Process-wide counters, without labels.

	Requests            = Family{Name: "spillway_requests_total", Help: "HTTP streams the filter saw, LLM API or not"}
	Routed              = Family{Name: "spillway_routed_total", Help: "LLM requests sent to at least one target"}
	LocalReplies        = Family{Name: "spillway_local_replies_total", Help: "replies Spillway sent itself (its errors and the answers of failover attempts)"}
	Attempts            = Family{Name: "spillway_attempts_total", Help: "upstream attempts, the first one of each request included"}
	Failovers           = Family{Name: "spillway_failovers_total", Help: "upstream attempts after the first (same-request failover)"}
	Restated            = Family{Name: "spillway_restated_total", Help: "upstream statuses a restatement rule rewrote"}
	StreamErrorEvents   = Family{Name: "spillway_stream_error_events_total", Help: "200 event streams whose first event was an error"}
	TruncatedStreams    = Family{Name: "spillway_truncated_streams_total", Help: "streams that ended without their terminal event"}
	Queued              = Family{Name: "spillway_queued_total", Help: "requests that waited in a connection's queue"}
	AdmissionFailedOpen = Family{Name: "spillway_admission_failed_open_total", Help: "attempts sent without a concurrency slot (quotaShareConcurrencyLimit)"}
	ModelNotServed      = Family{Name: "spillway_model_not_served_total", Help: "failures naming a model the connection does not serve (recorded in no layer)"}
	Wakeups             = Family{Name: "spillway_wakeups_total", Help: "cross-worker wake-ups sent when slots were freed"}
	Misconfigured       = Family{Name: "spillway_misconfigured_total", Help: "requests answered 500 spillway_misconfigured: the proxy lacks allow_on_headers_stop_iteration"}
	RouterRetries       = Family{Name: "spillway_router_retries_total", Help: "failover attempts made as the router's retries through the upstream filter (resilience.failover.via: router)"}
	RouterUnlinked      = Family{Name: "spillway_router_unlinked_total", Help: "router-mode requests whose response came with no try seen by an upstream instance (the upstream filter is missing or on another VM): they fail over by callout"}
	Panics              = Family{Name: "spillway_panics_total", Help: "callbacks that panicked and failed open"}
	AdminLookalikes     = Family{Name: "spillway_admin_lookalikes_total", Help: "requests answered 404 and never forwarded for looking like the admin API: its path spelled otherwise, or the admin token in a client credential header elsewhere"}
	// ABIPanics is defined by the ABI bridge itself (plugin/_bridge), at VM start.
	ABIPanics = Family{Name: "spillway_abi_panics_total", Help: "panics that escaped the filter and were recovered at the ABI edge (the stream passed through)"}

	// AdmissionStoreErrors counts what became of admission steps that met a shared-data
	// error (contention past the CAS loop's bound, a host failure), by TagOutcome: one of
	// the Store* outcomes.
	AdmissionStoreErrors = Family{Name: "spillway_admission_store_errors_total", Labels: []string{TagOutcome},
		Help: "admission steps that met a shared-data error, by what became of them (" + StoreRetried + ", " + StoreFailedOpen + ", " + StoreAbandoned + ")"}

	// Per route.

	RouteRequests = Family{Name: "spillway_route_requests_total", Labels: []string{TagRouteModel, TagOutcome},
		Help: "LLM requests by the route that served them (" + NoRoute + " for none) and how they ended"}

	// Per connection.

	ConnectionAttempts = Family{Name: "spillway_connection_attempts_total", Labels: []string{TagProvider, TagConnection},
		Help: "upstream attempts sent to the connection"}
	ConnectionFailovers = Family{Name: "spillway_connection_failovers_total", Labels: []string{TagProvider, TagConnection},
		Help: "failed attempts on the connection that the request failed over from"}
	ConnectionFailures = Family{Name: "spillway_connection_failures_total", Labels: []string{TagProvider, TagConnection, TagReason},
		Help: "failed attempts on the connection by their classification"}
	ConnectionRestated = Family{Name: "spillway_connection_restated_total", Labels: []string{TagProvider, TagConnection},
		Help: "responses of the connection whose status a restatement rule rewrote"}
	ConnectionQueueWaits = Family{Name: "spillway_connection_queue_waits_total", Labels: []string{TagProvider, TagConnection},
		Help: "requests that ended a wait in the connection's queue (granted, refused or gone)"}
	ConnectionQueueWaitMs = Family{Name: "spillway_connection_queue_wait_milliseconds_total", Labels: []string{TagProvider, TagConnection},
		Help: "time those requests waited, in milliseconds"}
	ConnectionWatchdogAborts = Family{Name: "spillway_connection_watchdog_aborts_total", Labels: []string{TagProvider, TagConnection, TagReason},
		Help: "streams of the connection the watchdog ended (reason " + WatchdogSlowStream + " or " + WatchdogStall + ")"}
	ConnectionRechecks = Family{Name: "spillway_connection_rechecks_total", Labels: []string{TagProvider, TagConnection, TagOutcome},
		Help: "re-checks of the connection's expired state (resilience.terminalRecheck) by outcome: " + RecheckRestored + ", " +
			RecheckRefused + " or " + RecheckInconclusive}

	// Gauges.

	BreakerState = Family{Name: "spillway_breaker_state", Kind: Gauge, Labels: []string{TagProvider},
		Help: "the provider's circuit: 0 CLOSED, 1 DEGRADED, 2 OPEN, 3 HALF_OPEN"}
	ProviderCooling = Family{Name: "spillway_provider_cooling", Kind: Gauge, Labels: []string{TagProvider},
		Help: "1 while the opt-in provider cooldown gate holds the provider back (defined only with the gate on)"}
	ConnectionCooling = Family{Name: "spillway_connection_cooling", Kind: Gauge, Labels: []string{TagProvider, TagConnection},
		Help: "1 while the connection cools down"}
	ConnectionTerminal = Family{Name: "spillway_connection_terminal", Kind: Gauge, Labels: []string{TagProvider, TagConnection},
		Help: "1 while the connection is in a terminal state (banned, expired, credits exhausted)"}
	ConnectionLockouts = Family{Name: "spillway_connection_lockouts", Kind: Gauge, Labels: []string{TagProvider, TagConnection},
		Help: "model lockouts in force on the connection"}
	ConnectionQueueDepth = Family{Name: "spillway_connection_queue_depth", Kind: Gauge, Labels: []string{TagProvider, TagConnection},
		Help: "requests waiting in the connection's queue, across workers (capped connections only)"}
	ConnectionSlotsInUse = Family{Name: "spillway_connection_slots_in_use", Kind: Gauge, Labels: []string{TagProvider, TagConnection},
		Help: "concurrency slots of the connection held by attempts, across workers (capped connections only)"}
)

// Outcomes of an admission step that met a shared-data error (TagOutcome of
// AdmissionStoreErrors).
const (
	StoreRetried    = "retried"     // put off to a later tick: the request stays paused, the release is tried again
	StoreFailedOpen = "failed_open" // the error persisted: the request went without a slot
	StoreAbandoned  = "abandoned"   // a release or queue update given up: its slot comes back when its lease expires
)

// Reasons of a watchdog abort (TagReason of ConnectionWatchdogAborts).
const (
	WatchdogSlowStream = "slow_stream"   // the throughput watchdog: too few bytes over its window (guide §6)
	WatchdogStall      = "content_stall" // no model output in time (guide §6)
)

// Outcomes of a terminal re-check (TagOutcome of ConnectionRechecks).
const (
	RecheckRestored     = "restored"     // a 2xx: the expired state was cleared
	RecheckRefused      = "refused"      // a 401 or 403: still expired, the next check backs off
	RecheckInconclusive = "inconclusive" // anything else, or no answer: nothing changed
)

// Families returns every family the filter defines, in a fixed order.
func Families() []*Family {
	return []*Family{&Requests, &Routed, &LocalReplies, &Attempts, &Failovers, &Restated, &StreamErrorEvents,
		&TruncatedStreams, &Queued, &AdmissionFailedOpen, &ModelNotServed, &Wakeups, &Misconfigured, &RouterRetries, &RouterUnlinked, &Panics,
		&AdminLookalikes, &ABIPanics, &AdmissionStoreErrors, &RouteRequests,
		&ConnectionAttempts, &ConnectionFailovers, &ConnectionFailures, &ConnectionRestated, &ConnectionQueueWaits,
		&ConnectionQueueWaitMs, &ConnectionWatchdogAborts, &ConnectionRechecks,
		&BreakerState, &ProviderCooling, &ConnectionCooling, &ConnectionTerminal, &ConnectionLockouts,
		&ConnectionQueueDepth, &ConnectionSlotsInUse}
}

// Lookup finds the family of a Prometheus name (a tag-extracted stat name).
func Lookup(name string) (*Family, bool) {
	for _, f := range Families() {
		if f.Name == name {
			return f, true
		}
	}
	return nil, false
}
