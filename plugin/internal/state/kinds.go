package state

// Record kinds: the first byte of every record in shared data (see Encoder). A kind has
// exactly one owner, so a record read through the wrong key — a key collision, a package
// reading another's record after a refactor — fails its kind check as ErrCorrupt instead of
// being misread. Every package encodes and decodes with these constants only (a test
// checks the call sites), and Kinds lists them all (a test checks they are distinct).
const (
	KindAffinityPin      = 'A' // affinity: a session pin slot
	KindBreaker          = 'B' // breaker: one provider's circuit
	KindConnCooldown     = 'C' // conncooldown: one connection's cooldown and terminal state
	KindRecoveryProbe    = 'Y' // conncooldown: a provider's recovery probe claim
	KindAdmissionConn    = 'Q' // admission: a connection's leases and waiting counts
	KindAdmissionTickets = 'T' // admission: a connection's published queue tickets
	KindAdmissionPool    = 'P' // admission: the global or a provider's lease pool
	KindGateWindow       = 'W' // providercooldown: a provider's failure window
	KindGateBackoff      = 'G' // providercooldown: a connection's backoff entry
	KindLockout          = 'L' // lockout: one model lockout
	KindLockoutIndex     = 'X' // lockout: a connection's lockout index
	KindSelectionCounter = 'R' // selection: a round-robin turn counter
	KindSelectionDeck    = 'K' // selection: a strict-random deck
	KindVMDirectory      = 'V' // admission: the directory of worker VMs and their heartbeats
	KindRecheckSchedule  = 'S' // recheck: an expired connection's re-check schedule
	KindRecheckTick      = 'U' // recheck: the process-wide claim of a re-check tick
)

// KindInfo names a record kind's owner.
type KindInfo struct {
	Kind   byte   // the kind byte
	Owner  string // the package that reads and writes it
	Record string // what the record holds
}

// Kinds lists every record kind with its owner.
var Kinds = []KindInfo{
	{KindAffinityPin, "affinity", "session pin slot"},
	{KindBreaker, "breaker", "provider circuit"},
	{KindConnCooldown, "conncooldown", "connection cooldown and terminal state"},
	{KindRecoveryProbe, "conncooldown", "provider recovery probe claim"},
	{KindAdmissionConn, "admission", "connection leases and waiting counts"},
	{KindAdmissionTickets, "admission", "connection's published queue tickets"},
	{KindAdmissionPool, "admission", "global or provider lease pool"},
	{KindGateWindow, "providercooldown", "provider failure window"},
	{KindGateBackoff, "providercooldown", "connection backoff entry"},
	{KindLockout, "lockout", "model lockout"},
	{KindLockoutIndex, "lockout", "connection lockout index"},
	{KindSelectionCounter, "selection", "round-robin counter"},
	{KindSelectionDeck, "selection", "strict-random deck"},
	{KindVMDirectory, "admission", "worker VM directory and heartbeats"},
	{KindRecheckSchedule, "recheck", "expired connection re-check schedule"},
	{KindRecheckTick, "recheck", "re-check tick claim"},
}
