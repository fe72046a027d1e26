package engine

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// notMechanismSettings are the resolved fields no mechanism config holds, each with what
// reads it instead. Every other leaf of policies.Resolved must reach a config that
// settingsFrom builds: a new resolved field either gets mapped there or listed here.
var notMechanismSettings = map[string]string{
	// Read per request or by the filter, not by a mechanism.
	"Providers[0].Profile":                   "classify.Input.Profile per request; its defaults are already applied by policies",
	"Providers[0].API":                       "the request path: a request skips providers of another API",
	"Providers[0].CountTruncatedStreams":     "the filter's stream accounting",
	"Providers[0].QuotaFamilies[0].Glob":     "lockout's Family function (ResolvedProvider.QuotaFamily), a function no comparison can see",
	"Providers[0].QuotaFamilies[0].Family":   "lockout's Family function (ResolvedProvider.QuotaFamily), a function no comparison can see",
	"Providers[0].ErrorRules[0].HasCooldown": "errorrules treats a 0 cooldown as none, so only Cooldown is needed",
	"Failover.MaxAttempts":                   "same-request failover in the request path",
	"Failover.Budget":                        "same-request failover in the request path",
	"Failover.ViaRouter":                     "the filter: router-mode failover through the upstream filter (router.go)",
	"Failover.HoldTries":                     "the filter: router-mode tries held for their body (router.go)",
	"Failover.CrossCluster":                  "the filter and the Envoy generator: router retries to another cluster (router.go)",
	"SessionAffinityHeaders":                 "the fixed header vocabulary (filter strips them, affinity reads the key)",
	"Admin.Enabled":                          "the filter's admin API",
	"Admin.PathPrefix":                       "the filter's admin API",
	"Admin.Token":                            "the filter's admin API",
	"MaxRequestBodyBytes":                    "the filter's body limit",
	"Routing.ClusterHeader":                  "the filter",
	"Routing.ClusterByHeader":                "the filter (setTargetHeaders)",
	"Routing.Paths":                          "the filter",
	"Routing.BodyWait":                       "the filter",
	"Routing.Mode":                           "the filter (header-routed mode)",
	"Routing.ModelHeader":                    "the filter (header-routed mode)",
	"Routing.DefaultModel":                   "the filter (header-routed mode)",
	"FirstEvent.MaxBytes":                    "the filter's first-event hold",
	"FirstEvent.Timeout":                     "the filter's first-event hold",
	"ThroughputWatchdog.Enabled":             "the filter's stream watchdog (watchdog.ConfigFrom)",
	"ThroughputWatchdog.Window":              "the filter's stream watchdog (watchdog.ConfigFrom)",
	"ThroughputWatchdog.Warmup":              "the filter's stream watchdog (watchdog.ConfigFrom)",
	"ThroughputWatchdog.MinBytesPerSecond":   "the filter's stream watchdog (watchdog.ConfigFrom)",
	"ThroughputWatchdog.MinOutputBytes":      "the filter's stream watchdog (watchdog.ConfigFrom)",
	"ContentStall.Enabled":                   "the filter's stream watchdog (watchdog.ConfigFrom)",
	"ContentStall.Timeout":                   "the filter's stream watchdog (watchdog.ConfigFrom)",
	// Folded into other resolved fields by policies.
	"RequestQueue.ExecutionMaxWait": "folded into each ResolvedConnection.ExecutionMaxWait",
	"RequestQueue.MaxQueueDepth":    "folded into each ResolvedConnection.MaxQueueDepth",
	// Positions and ids the engine reaches by index.
	"Providers[0].Index":                   "the provider's position",
	"Providers[0].Connections[0].Provider": "the connection's provider position",
	"Providers[0].Connections[0].Index":    "the connection's position",
	"Routes[0].Glob":                       "Resolved.Route matches it",
	"Routes[0].IsGlob":                     "Resolved.Route matches it",
	"Routes[0].Targets[0].Provider":        "the provider's position (the one provider of this test)",
	"Routes[0].Targets[0].ProviderID":      "diagnostics; the engine uses the index",
	"Routes[0].Targets[0].ConnectionID":    "diagnostics; the engine uses the index",
}

// TestEveryResolvedSettingReachesAMechanism fills a policies.Resolved with distinct
// sentinel values by reflection, then changes one leaf at a time: each change must show in
// the mechanism configs settingsFrom builds, unless the field is in notMechanismSettings.
// It fails when someone adds a resolved setting and forgets to map it.
func TestEveryResolvedSettingReachesAMechanism(t *testing.T) {
	var leaves []string
	collectLeaves(reflect.TypeFor[policies.Resolved](), "", &leaves)
	if len(leaves) < 80 {
		t.Fatalf("only %d leaves found; the walk is broken", len(leaves))
	}
	known := make(map[string]bool, len(leaves))
	for _, l := range leaves {
		known[l] = true
	}
	for path := range notMechanismSettings {
		if !known[path] {
			t.Errorf("notMechanismSettings lists %s, which policies.Resolved no longer has", path)
		}
	}

	base := sentinelResolved(t, "")
	baseSettings, err := settingsFrom(base, "", "")
	if err != nil {
		t.Fatalf("settingsFrom(sentinels): %v", err)
	}
	checked := 0
	for _, leaf := range leaves {
		if _, skip := notMechanismSettings[leaf]; skip {
			continue
		}
		checked++
		changed, err := settingsFrom(sentinelResolved(t, leaf), "", "")
		if err != nil {
			t.Errorf("%s: settingsFrom: %v", leaf, err)
			continue
		}
		if sameValue(reflect.ValueOf(baseSettings).Elem(), reflect.ValueOf(changed).Elem()) {
			t.Errorf("resolved %s reaches no mechanism config: map it in settingsFrom (engine.go), "+
				"or list it in notMechanismSettings with what reads it", leaf)
		}
	}
	if checked < 50 {
		t.Errorf("only %d settings checked", checked)
	}
}

// collectLeaves lists the settable leaves of a resolved type as paths ("Providers[0].ID").
// Slices of structs are followed through their first element; durations, secrets, globs,
// locations, maps and slices of scalars are leaves.
func collectLeaves(t reflect.Type, path string, out *[]string) {
	if t.Kind() == reflect.Struct && !isLeafStruct(t) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			p := f.Name
			if path != "" {
				p = path + "." + f.Name
			}
			collectLeaves(f.Type, p, out)
		}
		return
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct && !isLeafStruct(t.Elem()) {
		collectLeaves(t.Elem(), path+"[0]", out)
		return
	}
	*out = append(*out, path)
}

func isLeafStruct(t reflect.Type) bool {
	return t == reflect.TypeFor[policies.Secret]() || t == reflect.TypeFor[policies.Glob]()
}

// sentinelResolved builds a resolved policy with one provider of two connections, one
// route with one target, one rule of each kind, and a distinct value in every leaf; the
// leaf at perturb gets a different value.
func sentinelResolved(t *testing.T, perturb string) *policies.Resolved {
	t.Helper()
	f := &filler{perturb: perturb}
	r := new(policies.Resolved)
	f.fill(t, reflect.ValueOf(r).Elem(), "")
	return r
}

type filler struct {
	perturb string
	n       int
}

// fill sets every exported leaf under v.
func (f *filler) fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	typ := v.Type()
	if typ.Kind() == reflect.Struct && !isLeafStruct(typ) {
		for i := 0; i < typ.NumField(); i++ {
			field := typ.Field(i)
			if !field.IsExported() {
				continue
			}
			p := field.Name
			if path != "" {
				p = path + "." + field.Name
			}
			f.fill(t, v.Field(i), p)
		}
		return
	}
	if typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Struct && !isLeafStruct(typ.Elem()) {
		n := 1
		if path == "Providers[0].Connections" {
			n = 2 // so a target pinned to one connection differs from one over all
		}
		s := reflect.MakeSlice(typ, n, n)
		for i := 0; i < n; i++ {
			// Elements after the first are filled too, but only the first is perturbed.
			p := path + "[" + strconv.Itoa(i) + "]"
			if i > 0 {
				p = path + "[extra" + strconv.Itoa(i) + "]"
			}
			f.fill(t, s.Index(i), p)
		}
		v.Set(s)
		return
	}
	f.n++
	alt := path == f.perturb
	v.Set(reflect.ValueOf(f.leaf(t, typ, path, f.n, alt)).Convert(typ))
}

// leaf returns the sentinel value of one leaf (alt: the perturbed value).
func (f *filler) leaf(t *testing.T, typ reflect.Type, path string, n int, alt bool) any {
	t.Helper()
	pick := func(base, other any) any {
		if alt {
			return other
		}
		return base
	}
	last := path[strings.LastIndexByte(path, '.')+1:]
	switch {
	// Positions must stay valid: one provider, so every provider index is 0.
	case last == "Index" || (last == "Provider" && typ.Kind() == reflect.Int):
		return 0
	case path == "Routes[0].Targets[0].Connection":
		return pick(0, -1) // pinned to the first connection, or any of the two
	case path == "Routes[0].Targets[0].Weight":
		return pick(0, 7) // 0: the connection's weight counts, so it is checked too
	}
	switch typ {
	case reflect.TypeFor[time.Duration]():
		return pick(time.Duration(n)*time.Millisecond, time.Duration(n)*time.Millisecond+time.Hour)
	case reflect.TypeFor[policies.Strategy]():
		return pick(policies.StrategyP2C, policies.StrategyPriority)
	case reflect.TypeFor[policies.Profile]():
		return pick(policies.ProfileAPIKey, policies.ProfileOAuth)
	case reflect.TypeFor[policies.API]():
		return pick(policies.APIOpenAI, policies.APIAnthropic)
	case reflect.TypeFor[policies.Secret]():
		return pick(policies.NewSecret(fmt.Sprintf("secret-%d", n)), policies.NewSecret(fmt.Sprintf("other-%d", n)))
	case reflect.TypeFor[policies.Glob]():
		g, err := policies.CompileGlob(pick("s*", "o*").(string))
		if err != nil {
			t.Fatal(err)
		}
		return g
	case reflect.TypeFor[*time.Location]():
		return pick(time.UTC, time.FixedZone("+08:00", 8*3600))
	case reflect.TypeFor[map[string]time.Duration](): // cooldownByKind: keys are failure kinds
		return map[string]time.Duration{"timeout": pick(time.Duration(n)*time.Second, time.Duration(n)*time.Second+time.Hour).(time.Duration)}
	case reflect.TypeFor[map[string]int]():
		return map[string]int{fmt.Sprintf("model-%d", n): pick(n, n+1000).(int)}
	case reflect.TypeFor[map[string]policies.API]():
		return map[string]policies.API{pick("/s", "/o").(string): policies.APIOpenAI}
	case reflect.TypeFor[[]int]():
		return []int{pick(400+n%100, 500+n%100).(int)}
	case reflect.TypeFor[[]string]():
		return []string{pick(fmt.Sprintf("s%d", n), fmt.Sprintf("o%d", n)).(string)}
	}
	switch typ.Kind() {
	case reflect.Bool:
		return pick(true, false)
	case reflect.Int, reflect.Int64:
		return pick(100+n, 100000+n)
	case reflect.String:
		return pick(fmt.Sprintf("s%d", n), fmt.Sprintf("o%d", n))
	}
	t.Fatalf("no sentinel for %s (%s): teach the test this type", path, typ)
	return nil
}

// sameValue compares two settings values, unexported fields included. Functions (lockout's
// Family and Bare) compare by whether they are set.
func sameValue(a, b reflect.Value) bool {
	if a.Kind() != b.Kind() {
		return false
	}
	switch a.Kind() {
	case reflect.Func:
		return a.IsNil() == b.IsNil()
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !sameValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := 0; i < a.Len(); i++ {
			if !sameValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		keys := a.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		for _, k := range keys {
			bv := b.MapIndex(k)
			if !bv.IsValid() || !sameValue(a.MapIndex(k), bv) {
				return false
			}
		}
		return true
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	}
	panic("sameValue: unhandled kind " + a.Kind().String())
}

// TestSettingsFromMapsTheDemo checks a few mapped values end to end on a real policy, so
// the conversion is not only shown to react but to carry the right value.
func TestSettingsFromMapsTheDemo(t *testing.T) {
	f := newFixture(t, demoForSettings)
	res := f.e.res
	s, err := settingsFrom(res, "", "")
	if err != nil {
		t.Fatal(err)
	}
	p := s.providers[0]
	checks := []struct {
		name      string // setting
		got, want any    // mechanism value and resolved value
	}{
		{"breaker failure threshold", p.breaker.FailureThreshold, res.Providers[0].Breaker.FailureThreshold},
		{"breaker reset", p.breaker.ResetTimeout, res.Providers[0].Breaker.ResetTimeout},
		{"connection base cooldown", p.cooldown.BaseCooldown, res.Providers[0].ConnectionCooldown.BaseCooldown},
		{"retry hints", p.cooldown.PreferRetryHint, res.Providers[0].ConnectionCooldown.UseUpstreamRetryHints},
		{"lockout on", p.lockout.Enabled, res.ModelLockout.Enabled},
		{"lockout escalation window", p.lockout.EscalationWindow, policies.ModelLockoutEscalationWindow},
		{"lockout queue wait", p.lockout.QueueMaxWait, res.RequestQueue.MaxWait},
		{"admission cap", p.conns[0].admit.MaxConcurrent, res.Providers[0].Connections[0].MaxConcurrent},
		{"admission queue wait", p.conns[1].admit.Queue.MaxWait, res.Providers[0].Connections[1].QueueMaxWait},
		{"p2c minimum samples", s.latency.MinSamples, policies.P2CLatencyMinSamples},
		{"affinity TTL", s.affinity.TTL, res.SessionAffinityTTL},
		{"affinity slots", s.affinity.Slots, policies.SessionAffinitySlots},
		{"combo wait", s.combo.MaxWait, res.ComboCooldownWait.MaxWait},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// demoForSettings has distinct, non-default values where the checks above look.
var demoForSettings = []byte(`
providers:
  - id: p
    profile: oauth
    cluster: c
    connections:
      - {id: a, maxConcurrent: 3}
      - {id: b, rateLimitOverrides: {maxWaitMs: 1500}}
routes:
  - model: m
    targets: [{provider: p}]
resilience:
  providerBreaker: {oauth: {failureThreshold: 6, resetTimeoutMs: 45000}}
  connectionCooldown: {oauth: {baseCooldownMs: 2500}}
  modelLockout: {enabled: true, maxCooldownMs: 3600000}
  requestQueue: {maxWaitMs: 7000}
  comboCooldownWait: {maxWaitMs: 12000}
  sessionAffinityTtlMs: 60000
`)
