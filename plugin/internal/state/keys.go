package state

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// # Key layout (the one place it is defined)
//
// Istio sets no vm_id, so every WasmPlugin in a proxy — every policy — shares one
// shared-data map (proxy-wasm-cpp-host src/shared_data.cc: one map per vm_id). A key says
// whose a record is, and so who shares it:
//
//   - Upstream facts (ScopeUpstream), keyed by UpstreamID (the provider's cluster and
//     authority): the breaker and the provider cooldown window. Two policies that name one
//     upstream differently (other provider ids) share its circuit; two upstreams never do,
//     since a cluster name is unique in one Envoy and the authority tells apart the hosts a
//     shared cluster (an egress gateway) reaches. The recovery probe claim too: one probe
//     per upstream after an outage.
//   - Account facts (ScopeAccount), keyed by AccountID (the upstream and the connection's
//     credential header and value, hashed: never the credential itself): connection cooldown
//     and terminal states, the provider cooldown's connection backoff, model lockouts and
//     their index, and the lease record (requests in flight on the key). Two policies on one
//     key see each other's 429s, cooldowns and terminal states, and count each other's
//     leases. The upstream is part of the account because a credential is an account only
//     where it was issued: placeholder credentials ("Bearer ollama") repeat across unrelated
//     hosts. A connection without a credential has no account to share: its id is
//     LocalAccountID, the policy's namespace with its provider and connection ids.
//   - Policy records (ScopePolicy), keyed by the policy's NamespaceID: queue tickets,
//     round-robin turns and strict-random decks, session pins, and the global and provider
//     pools (caps the policy sets). Two policies never mix them unless they name one
//     stateNamespace on purpose.
//   - Process records (ScopeProcess), one per proxy on purpose: the cache generation (account
//     facts are shared, so a VM's cache must be voided by any policy's write to them; a
//     generation per namespace would hide another policy's 429 until the next write of this
//     policy's own), the VM directory, the re-check tick claim, the guard key and the wake
//     queues (a release on a
//     shared lease record wakes every policy's waiters: a wake-up names the gate by the lease
//     record's identity, admission.Gate.ID).
//
// Every key is KeyPrefix, a three-byte tag, then the kind's parts joined by ':'. An identity
// part (U, A, N, V below) is exactly IDLen lowercase hex digits; at most one free part (a
// policy id, a route name, a lockout's scope and name) comes last, so no two parts lists
// build one key. Keys lists every kind; Live (the kinds that bypass the per-VM Cache) is
// derived from it, and a test runs the engine over a recording store and checks that every
// key it writes parses as a registered kind.
//
// The layout's generation is KeyPrefix's "2" ("spw1:" named records by the policy's ids).
// A filter of one generation never reads the other's keys: during a rolling upgrade in one
// proxy (an ECDS update that brings a new module while old VMs drain), old and new VMs
// keep separate state, so for that moment neither sees the other's failures and each
// counts only its own leases against a cap. The old keys stay in shared data, unread, until
// the proxy restarts (ABI 0.2 has no delete); they are bounded by the old policy.

// KeyPrefix starts every key Spillway writes and carries the key layout's generation.
const KeyPrefix = "spw2:"

// IDLen is the length of an identity part of a key: 8 bytes of SHA-256 in hex. Fixed, so
// keys are bounded whatever the names they stand for; 64 bits keep the chance that two of
// a proxy's few hundred upstreams, accounts or namespaces collide below 1 in 10^14.
const IDLen = 16

// Scope says who shares a record.
type Scope uint8

// The scopes (see the layout above).
const (
	ScopeProcess Scope = iota
	ScopeUpstream
	ScopeAccount
	ScopePolicy
)

var scopeNames = [...]string{"process", "upstream", "account", "policy"}

func (s Scope) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return "scope?"
}

// KeyKind is one registered key layout. Build its keys with Key or Prefix only.
type KeyKind struct {
	Tag   string // three bytes after KeyPrefix
	Scope Scope
	// Parts is the shape after the tag: 'U' upstream id, 'A' account id, 'N' namespace id,
	// 'V' VM id (each IDLen hex digits), then at most one free part last: 'p' a policy id,
	// 'r' a route name, 'l' a lockout's scope and name or pool slot, 's' a slot number.
	Parts string
	// Live: the record changes on most requests (leases, tickets, turns, pins, heartbeats),
	// so it bypasses the per-VM Cache and does not bump the generation (IsLive).
	Live bool
	// Kind is the record kind stored under the key (kinds.go); 0 for a key that holds no
	// record (the generation, the guard, a queue name).
	Kind  byte
	Owner string // the package that builds the key
}

// The key kinds. Each is named after its record; the owning package builds its keys from
// it and nothing else does.
var (
	KeyBreaker      = KeyKind{Tag: "brk", Scope: ScopeUpstream, Parts: "U", Kind: KindBreaker, Owner: "breaker"}
	KeyGateWindow   = KeyKind{Tag: "pcw", Scope: ScopeUpstream, Parts: "U", Kind: KindGateWindow, Owner: "providercooldown"}
	KeyGateBackoff  = KeyKind{Tag: "pcb", Scope: ScopeAccount, Parts: "A", Kind: KindGateBackoff, Owner: "providercooldown"}
	KeyConnCooldown = KeyKind{Tag: "ccd", Scope: ScopeAccount, Parts: "A", Kind: KindConnCooldown, Owner: "conncooldown"}
	// KeyRecoveryProbe is an upstream's recovery probe claim: one probe per upstream after an
	// outage, whichever policy claims it.
	KeyRecoveryProbe = KeyKind{Tag: "ccp", Scope: ScopeUpstream, Parts: "U", Kind: KindRecoveryProbe, Owner: "conncooldown"}
	// KeyRecheck is an expired account's re-check schedule: one claim per account.
	KeyRecheck = KeyKind{Tag: "rck", Scope: ScopeAccount, Parts: "A", Live: true, Kind: KindRecheckSchedule, Owner: "recheck"}
	// KeyRecheckTick is the process-wide claim of a re-check tick.
	KeyRecheckTick  = KeyKind{Tag: "rct", Scope: ScopeProcess, Parts: "", Live: true, Kind: KindRecheckTick, Owner: "recheck"}
	KeyLockoutIndex = KeyKind{Tag: "mli", Scope: ScopeAccount, Parts: "A", Kind: KindLockoutIndex, Owner: "lockout"}
	KeyLockout      = KeyKind{Tag: "mlk", Scope: ScopeAccount, Parts: "Al", Kind: KindLockout, Owner: "lockout"}
	KeyLease        = KeyKind{Tag: "adl", Scope: ScopeAccount, Parts: "A", Live: true, Kind: KindAdmissionConn, Owner: "admission"}
	KeyTickets      = KeyKind{Tag: "adt", Scope: ScopePolicy, Parts: "NA", Live: true, Kind: KindAdmissionTickets, Owner: "admission"}
	KeyGlobalPool   = KeyKind{Tag: "adg", Scope: ScopePolicy, Parts: "N", Live: true, Kind: KindAdmissionPool, Owner: "admission"}
	KeyProviderPool = KeyKind{Tag: "adp", Scope: ScopePolicy, Parts: "Np", Live: true, Kind: KindAdmissionPool, Owner: "admission"}
	KeyTurn         = KeyKind{Tag: "srr", Scope: ScopePolicy, Parts: "Nr", Live: true, Kind: KindSelectionCounter, Owner: "selection"}
	KeyDeck         = KeyKind{Tag: "sdk", Scope: ScopePolicy, Parts: "Nr", Live: true, Kind: KindSelectionDeck, Owner: "selection"}
	KeyPin          = KeyKind{Tag: "aff", Scope: ScopePolicy, Parts: "Ns", Live: true, Kind: KindAffinityPin, Owner: "affinity"}
	KeyDirectory    = KeyKind{Tag: "vms", Scope: ScopeProcess, Parts: "", Live: true, Kind: KindVMDirectory, Owner: "admission"}
	KeyGeneration   = KeyKind{Tag: "gen", Scope: ScopeProcess, Parts: "", Owner: "state"}
	KeyGuard        = KeyKind{Tag: "grd", Scope: ScopeProcess, Parts: "", Owner: "filter"}
	KeyWakeQueue    = KeyKind{Tag: "wak", Scope: ScopeProcess, Parts: "V", Owner: "filter"}
)

// Keys lists every key kind (a test checks the tags are distinct and three bytes, and that
// every record kind has a key).
var Keys = []KeyKind{
	KeyBreaker, KeyGateWindow, KeyGateBackoff, KeyConnCooldown, KeyRecoveryProbe, KeyRecheck,
	KeyRecheckTick, KeyLockoutIndex, KeyLockout,
	KeyLease, KeyTickets, KeyGlobalPool, KeyProviderPool, KeyTurn, KeyDeck, KeyPin,
	KeyDirectory, KeyGeneration, KeyGuard, KeyWakeQueue,
}

// Key builds a key of kind k from its parts, in the order Parts names them. It does not
// check them: ParseKey does, in tests, for every key the engine writes.
func (k KeyKind) Key(parts ...string) string {
	n := len(KeyPrefix) + len(k.Tag)
	for _, p := range parts {
		n += 1 + len(p)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(KeyPrefix)
	b.WriteString(k.Tag)
	for _, p := range parts {
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

// Prefix is Key(parts...) + ":", for a kind whose last part is appended at use (a pin's
// slot, a lockout's name).
func (k KeyKind) Prefix(parts ...string) string { return k.Key(parts...) + ":" }

// tagCode packs a three-byte tag for IsLive's comparison (comparing strings costs more in
// a Go wasm module than comparing integers).
func tagCode(a, b, c byte) uint32 { return uint32(a)<<16 | uint32(b)<<8 | uint32(c) }

// liveTags are the tags of the Live kinds, derived from Keys.
var liveTags = func() []uint32 {
	var out []uint32
	for _, k := range Keys {
		if k.Live {
			out = append(out, tagCode(k.Tag[0], k.Tag[1], k.Tag[2]))
		}
	}
	return out
}()

// IsLive reports whether key is of a Live kind: the Cache's live selector in the filter.
// It reads the three tag bytes only; it runs on every shared-data access.
func IsLive(key string) bool {
	const n = len(KeyPrefix)
	if len(key) < n+3 {
		return false
	}
	c := tagCode(key[n], key[n+1], key[n+2])
	for _, t := range liveTags {
		if t == c {
			return true
		}
	}
	return false
}

// ParseKey returns the registered kind key is of, and whether key has that kind's shape
// exactly: the prefix, a registered tag, then its parts (identity parts of IDLen lowercase
// hex digits, a non-empty free part last).
func ParseKey(key string) (KeyKind, bool) {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok || len(rest) < 3 {
		return KeyKind{}, false
	}
	var kind KeyKind
	for _, k := range Keys {
		if k.Tag == rest[:3] {
			kind, ok = k, true
			break
		}
	}
	if !ok {
		return KeyKind{}, false
	}
	rest = rest[3:]
	for i := 0; i < len(kind.Parts); i++ {
		if len(rest) < 2 || rest[0] != ':' {
			return kind, false
		}
		rest = rest[1:]
		switch kind.Parts[i] {
		case 'U', 'A', 'N', 'V':
			if len(rest) < IDLen || !isLowerHex(rest[:IDLen]) {
				return kind, false
			}
			rest = rest[IDLen:]
		case 's':
			for _, c := range []byte(rest) {
				if c < '0' || c > '9' {
					return kind, false
				}
			}
			rest = ""
		default: // a free part: the rest of the key
			rest = ""
		}
	}
	return kind, rest == ""
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// identity hashes a domain and its parts, each length-prefixed so no two lists of parts
// hash the same input, into an IDLen-digit key part.
func identity(domain string, parts ...string) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, p := range append([]string{domain}, parts...) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(p)))])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:IDLen/2])
}

// UpstreamID identifies a provider's upstream: its Envoy cluster and the authority the
// filter sends it ("" when the client's is left alone).
func UpstreamID(cluster, authority string) string { return identity("upstream", cluster, authority) }

// AccountID identifies an upstream account: the upstream (UpstreamID) and the credential
// header and value a connection sends it. Only this hash reaches a key.
func AccountID(upstream, credentialHeader, credentialValue string) string {
	return identity("account", upstream, credentialHeader, credentialValue)
}

// LocalAccountID is the account id of a connection that sends no credential: its policy's
// namespace (NamespaceID) and its provider and connection ids, so it is shared with no
// other policy.
func LocalAccountID(namespace, provider, connection string) string {
	return identity("local", namespace, provider, connection)
}

// NamespaceID identifies a policy's own records: the policy's stateNamespace when it sets
// one (two plugins that name the same one share on purpose), else the plugin's name and
// root id (proxy-wasm properties plugin_name and plugin_root_id; Istio names a WasmPlugin's
// filter <namespace>.<name>). The two never meet: they hash under different domains.
func NamespaceID(stateNamespace, pluginName, rootID string) string {
	if stateNamespace != "" {
		return identity("namespace", stateNamespace)
	}
	return identity("plugin", pluginName, rootID)
}
