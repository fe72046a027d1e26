package policies

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// validator checks a decoded policy and applies its clamps, collecting every problem.
type validator struct {
	p        *Policy
	errs     Errors
	warnings Errors
	fromEnv  map[string]bool // paths whose string came from the environment
	failed   map[string]bool // paths that already failed to decode

	providers   map[string]int // provider id -> index
	connections map[string]connRef
	// Lower-cased ids: the engine matches rule providers case-insensitively, so ids that
	// differ only in case would be ambiguous.
	providersFold   map[string]int
	connectionsFold map[string]connRef
}

type connRef struct {
	provider, index int
}

func newValidator(p *Policy, fromEnv, failed map[string]bool) *validator {
	return &validator{p: p, fromEnv: fromEnv, failed: failed,
		providers: make(map[string]int), connections: make(map[string]connRef),
		providersFold: make(map[string]int), connectionsFold: make(map[string]connRef)}
}

// fail records a problem unless decoding already reported that path or one above it (a
// field that failed to decode is left empty; saying so again would be noise).
func (v *validator) fail(path, message string) {
	for p := path; len(v.failed) > 0; p = parentPath(p) {
		if v.failed[p] {
			return
		}
		if p == "" {
			break
		}
	}
	v.errs.add(path, message)
}

// parentPath strips the last element of a path: a.b[2].c -> a.b[2] -> a.b -> a -> "".
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return ""
}

func (v *validator) warn(path, message string) {
	v.warnings.add(path, message)
}

// quote quotes a string value for a message, unless it came from the environment.
func (v *validator) quote(path, s string) string {
	if v.fromEnv[path] {
		return "(value from the environment)"
	}
	return strconv.Quote(truncate(s, 80))
}

func (v *validator) run() {
	p := v.p
	if len(p.Providers) == 0 {
		v.fail("providers", "at least one provider is required")
	}
	for i := range p.Providers {
		v.provider(&p.Providers[i], joinIndex("providers", i), i)
	}
	if len(p.Routes) == 0 {
		v.fail("routes", "at least one route is required")
	}
	routeModels := make(map[string]int)
	for i := range p.Routes {
		v.route(&p.Routes[i], joinIndex("routes", i), routeModels, i)
	}
	v.resilience(&p.Resilience, "resilience")
	v.admin(&p.Admin, "admin")
	v.routing(&p.Routing, "routing")
	v.failoverPath(&p.Resilience.Failover, p.Routing.Mode, "resilience.failover")
	if p.MaxRequestBodyBytes != nil {
		v.rangeInt64("maxRequestBodyBytes", *p.MaxRequestBodyBytes, 1024, 256<<20, "")
	}
	if p.StateNamespace != "" {
		v.identifier("stateNamespace", p.StateNamespace)
	}
}

// --- providers and connections ---

func (v *validator) provider(pr *Provider, path string, index int) {
	idPath := joinField(path, "id")
	if v.identifier(idPath, pr.ID) {
		if prev, dup := v.providersFold[strings.ToLower(pr.ID)]; dup {
			v.fail(idPath, "duplicate provider id "+v.quote(idPath, pr.ID)+" (also providers["+strconv.Itoa(prev)+"]; ids are compared ignoring case)")
		} else {
			v.providers[pr.ID] = index
			v.providersFold[strings.ToLower(pr.ID)] = index
		}
	}
	if pr.Profile != "" && !validProfile(pr.Profile) {
		v.fail(joinField(path, "profile"), "unknown profile "+v.quote(joinField(path, "profile"), string(pr.Profile))+" (want oauth, apikey or local)")
	}
	if pr.API != "" && !validAPI(pr.API) {
		v.fail(joinField(path, "api"), "unknown API "+v.quote(joinField(path, "api"), string(pr.API))+" (want "+apiList()+")")
	}
	clusterPath := joinField(path, "cluster")
	switch {
	case pr.Cluster == "":
		v.fail(clusterPath, "required")
	case !validHeaderValueToken(pr.Cluster):
		v.fail(clusterPath, "cluster name must not contain spaces or control characters")
	}
	if pr.Authority != "" && !validAuthority(pr.Authority) {
		v.fail(joinField(path, "authority"), "invalid authority "+v.quote(joinField(path, "authority"), pr.Authority)+" (want host or host:port)")
	}
	connsPath := joinField(path, "connections")
	if len(pr.Connections) == 0 {
		v.fail(connsPath, "at least one connection is required")
	}
	for i := range pr.Connections {
		v.connection(&pr.Connections[i], joinIndex(connsPath, i), connRef{provider: index, index: i})
	}
	famPath := joinField(path, "quotaFamilies")
	for _, glob := range sortedKeys(pr.QuotaFamilies) {
		keyPath := joinKey(famPath, glob)
		if _, err := CompileGlob(glob); err != nil {
			v.fail(keyPath, "invalid model glob: "+err.Error())
		} else if len(glob) > maxModelBytes {
			v.fail(keyPath, "model glob is longer than "+strconv.Itoa(maxModelBytes)+" bytes")
		}
		if !validModelName(pr.QuotaFamilies[glob]) {
			v.fail(keyPath, "quota family must be a model-like name: 1 to "+strconv.Itoa(maxModelBytes)+" bytes, no spaces at the ends or control characters")
		}
	}
}

func (v *validator) connection(c *Connection, path string, ref connRef) {
	idPath := joinField(path, "id")
	if v.identifier(idPath, c.ID) {
		if prev, dup := v.connectionsFold[strings.ToLower(c.ID)]; dup {
			v.fail(idPath, "duplicate connection id "+v.quote(idPath, c.ID)+" (also providers["+
				strconv.Itoa(prev.provider)+"].connections["+strconv.Itoa(prev.index)+"]); connection ids are unique across providers, ignoring case")
		} else {
			v.connections[c.ID] = ref
			v.connectionsFold[strings.ToLower(c.ID)] = ref
		}
	}
	if c.Credential != nil {
		v.credential(c.Credential, joinField(path, "credential"))
	}
	if c.MaxConcurrent != nil {
		v.rangeInt(joinField(path, "maxConcurrent"), *c.MaxConcurrent, 1, maxConcurrencyCap, "omit it for no cap")
	}
	mcPath := joinField(path, "modelConcurrency")
	for _, model := range sortedKeys(c.ModelConcurrency) {
		keyPath := joinKey(mcPath, model)
		if !validModelName(model) {
			v.fail(keyPath, "model name must be 1 to "+strconv.Itoa(maxModelBytes)+" bytes, without spaces at the ends or control characters")
			continue
		}
		v.rangeInt(keyPath, c.ModelConcurrency[model], 1, maxConcurrencyCap, "omit the model for no cap")
	}
	if c.Weight != nil {
		v.rangeInt(joinField(path, "weight"), *c.Weight, 0, maxWeight, "")
	}
	if o := c.RateLimitOverrides; o != nil {
		op := joinField(path, "rateLimitOverrides")
		v.clampMs(joinField(op, "maxWaitMs"), o.MaxWaitMs, RequestQueueMinWait.Milliseconds(), RequestQueueMaxWaitCap.Milliseconds())
		v.clampMs(joinField(op, "executionMaxWaitMs"), o.ExecutionMaxWaitMs, RequestQueueMinWait.Milliseconds(), RequestQueueMaxWaitCap.Milliseconds())
	}
}

// forbiddenCredentialHeaders are headers a credential may not replace: pseudo-headers are
// not tokens anyway; these would break framing, routing or Spillway's own contract.
var forbiddenCredentialHeaders = map[string]bool{
	"host": true, "content-length": true, "content-type": true, "transfer-encoding": true,
	"connection": true, "keep-alive": true, "proxy-connection": true, "upgrade": true,
	"te": true, "trailer": true, "expect": true,
	"x-session-id": true, "x-codex-session-id": true, "x-omniroute-session": true,
}

func (v *validator) credential(cr *Credential, path string) {
	hp := joinField(path, "header")
	switch lower := strings.ToLower(cr.Header); {
	case cr.Header == "":
		v.fail(hp, "required")
	case !isHTTPToken(cr.Header):
		v.fail(hp, "invalid header name "+v.quote(hp, cr.Header)+" (want an HTTP token such as authorization or x-api-key)")
	case forbiddenCredentialHeaders[lower], strings.HasPrefix(lower, "x-spillway-"), strings.HasPrefix(lower, "x-envoy-"):
		v.fail(hp, "header "+v.quote(hp, cr.Header)+" cannot carry a credential")
	default:
		cr.Header = lower // Envoy header maps are lower-case
	}
	vp := joinField(path, "value")
	// Never echo the value: it is a secret.
	switch value := cr.Value.Reveal(); {
	case value == "":
		v.fail(vp, "required (empty credential value)")
	case hasControlExceptTab(value):
		v.fail(vp, "contains a line break or control character (check the environment variable for a trailing newline)")
	case strings.TrimSpace(value) != value:
		v.fail(vp, "has leading or trailing whitespace")
	}
}

// --- routes ---

func (v *validator) route(r *Route, path string, seen map[string]int, index int) {
	mp := joinField(path, "model")
	switch {
	case r.Model == "":
		v.fail(mp, "required")
	default:
		if _, err := CompileGlob(r.Model); err != nil {
			v.fail(mp, "invalid model glob: "+err.Error())
		} else if len(r.Model) > maxModelBytes {
			v.fail(mp, "model is longer than "+strconv.Itoa(maxModelBytes)+" bytes")
		} else if prev, dup := seen[r.Model]; dup {
			v.fail(mp, "duplicate route for model "+v.quote(mp, r.Model)+" (also routes["+strconv.Itoa(prev)+"])")
		} else {
			seen[r.Model] = index
		}
	}
	sp := joinField(path, "strategy")
	if r.Strategy != "" && !validStrategy(r.Strategy) {
		v.fail(sp, "unknown strategy "+v.quote(sp, string(r.Strategy))+" (want one of "+strategyList()+")")
	}
	tp := joinField(path, "targets")
	if len(r.Targets) == 0 {
		v.fail(tp, "at least one target is required")
	}
	type targetKey struct{ provider, connection, model string }
	seenTargets := make(map[targetKey]int)
	positiveWeight := false
	for i := range r.Targets {
		t := &r.Targets[i]
		ip := joinIndex(tp, i)
		pp := joinField(ip, "provider")
		pi, known := v.providers[t.Provider]
		switch {
		case t.Provider == "":
			v.fail(pp, "required")
		case !known:
			v.fail(pp, "unknown provider "+v.quote(pp, t.Provider))
		}
		if t.Connection != "" {
			cp := joinField(ip, "connection")
			ref, ok := v.connections[t.Connection]
			switch {
			case !ok:
				v.fail(cp, "unknown connection "+v.quote(cp, t.Connection))
			case known && ref.provider != pi:
				v.fail(cp, "connection "+v.quote(cp, t.Connection)+" belongs to provider "+
					strconv.Quote(v.p.Providers[ref.provider].ID)+", not "+v.quote(pp, t.Provider))
			}
		}
		if t.Model != "" && !validModelName(t.Model) {
			v.fail(joinField(ip, "model"), "model name must be 1 to "+strconv.Itoa(maxModelBytes)+" bytes, without spaces at the ends or control characters")
		}
		if t.Weight != nil {
			v.rangeInt(joinField(ip, "weight"), *t.Weight, 0, maxWeight, "")
		}
		if t.Weight == nil || *t.Weight > 0 {
			positiveWeight = true
		}
		key := targetKey{t.Provider, t.Connection, t.Model}
		if prev, dup := seenTargets[key]; dup {
			v.fail(ip, "duplicate target (same as targets["+strconv.Itoa(prev)+"])")
		} else {
			seenTargets[key] = i
		}
	}
	if r.Strategy == StrategyWeighted && len(r.Targets) > 0 && !positiveWeight {
		v.fail(tp, "a weighted route needs a target with weight > 0 (every target is a standby)")
	}
	v.routeAPIs(r, path)
}

// routeAPIs warns about a route whose targets speak more than one API: it is valid (a glob
// route may serve both), but each request only ever reaches the targets of its own API.
func (v *validator) routeAPIs(r *Route, path string) {
	speaks := make(map[API]bool, len(APIs))
	for i := range r.Targets {
		if pi, ok := v.providers[r.Targets[i].Provider]; ok {
			speaks[providerAPI(&v.p.Providers[pi])] = true
		}
	}
	if len(speaks) < 2 {
		return
	}
	var names []string
	for _, api := range APIs {
		if speaks[api] {
			names = append(names, string(api))
		}
	}
	v.warn(path, "targets speak "+strings.Join(names, " and ")+
		": a request skips the targets whose provider does not speak its API")
}

// providerAPI is a provider's API, defaulted.
func providerAPI(pr *Provider) API {
	if pr.API == "" {
		return ProviderAPI
	}
	return pr.API
}

// --- admin ---

func (v *validator) admin(a *Admin, path string) {
	pp := joinField(path, "pathPrefix")
	if a.PathPrefix != "" {
		switch {
		case a.PathPrefix == "/":
			v.fail(pp, "must not be \"/\" (the admin API would shadow all traffic)")
		case !strings.HasPrefix(a.PathPrefix, "/") || !strings.HasSuffix(a.PathPrefix, "/"):
			v.fail(pp, "must start and end with '/'")
		case len(a.PathPrefix) > 256 || hasControl(a.PathPrefix) || strings.ContainsAny(a.PathPrefix, " ?#%"):
			v.fail(pp, "must be a plain path without spaces, '?', '#' or '%'")
		case !isCanonicalPath(a.PathPrefix):
			// The filter refuses every path that canonicalises under the prefix without
			// being under it byte for byte (README "Admin API"): a prefix in another form
			// than its own canonical one would turn that on paths it never meant.
			v.fail(pp, canonicalPathRule)
		}
	}
	tp := joinField(path, "token")
	switch token := a.Token.Reveal(); {
	case token == "":
	case hasControl(token) || strings.ContainsFunc(token, unicode.IsSpace):
		// No whitespace at all: a credential value with a scheme ("Bearer <token>") is then
		// never the token whole, which the filter's check of client credentials relies on.
		v.fail(tp, "contains whitespace or a control character (check the environment variable for a trailing newline)")
	case len(token) < minAdminTokenLength:
		v.warn(tp, "admin token is shorter than "+strconv.Itoa(minAdminTokenLength)+" characters")
	}
}

// --- helpers ---

// isCanonicalPath reports whether a configured path is in the form the filter's admin check
// reads paths in (plugin/internal/admin, CanonicalPath), but for ASCII case: ASCII without
// '%' or '\\', and no empty, "." or ".." segment. The admin prefix must be (else the check
// would refuse paths it never meant), and so must every routed path (so none can be a
// lookalike of the prefix, and the filter checks a routed path's spelling no further).
func isCanonicalPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c >= utf8.RuneSelf || c == '%' || c == '\\' {
			return false
		}
	}
	return !strings.Contains(p, "//") && !strings.Contains(p, "/./") && !strings.Contains(p, "/../") &&
		!strings.HasSuffix(p, "/.") && !strings.HasSuffix(p, "/..")
}

// canonicalPathRule is isCanonicalPath's rule as an error message.
const canonicalPathRule = "must be a canonical path: ASCII, no '%' or '\\', no empty, '.' or '..' segments"

const (
	maxModelBytes       = 256 // as plugin/internal/lockout accepts
	maxIdentifierLength = 64
	maxConcurrencyCap   = 100000
	maxWeight           = 1000
	minAdminTokenLength = 16
)

// identifier checks an id: required, letters, digits, '.', '_', '-', not starting with
// punctuation. It reports whether the id is usable.
func (v *validator) identifier(path, id string) bool {
	if id == "" {
		v.fail(path, "required")
		return false
	}
	if !validIdentifier(id) {
		v.fail(path, "invalid id "+v.quote(path, id)+" (want letters, digits, '.', '_' or '-', at most 64, starting with a letter or digit)")
		return false
	}
	return true
}

func validIdentifier(id string) bool {
	if id == "" || len(id) > maxIdentifierLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// validModelName accepts an upstream model name: 1 to 256 bytes, no control characters, no
// surrounding spaces.
func validModelName(s string) bool {
	return s != "" && len(s) <= maxModelBytes && !hasControl(s) && strings.TrimSpace(s) == s
}

func validProfile(p Profile) bool {
	for _, q := range Profiles {
		if p == q {
			return true
		}
	}
	return false
}

func validAPI(a API) bool {
	for _, q := range APIs {
		if a == q {
			return true
		}
	}
	return false
}

func apiList() string {
	names := make([]string, len(APIs))
	for i, a := range APIs {
		names[i] = string(a)
	}
	return strings.Join(names, " or ")
}

func validStrategy(s Strategy) bool {
	for _, q := range Strategies {
		if s == q {
			return true
		}
	}
	return false
}

func strategyList() string {
	names := make([]string, len(Strategies))
	for i, s := range Strategies {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// isHTTPToken reports whether s is an RFC 9110 token (a valid header name).
func isHTTPToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValueToken reports whether s is usable as a header value without spaces (a
// cluster name travels in a header to Envoy's cluster_header routing).
func validHeaderValueToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return s != ""
}

// validAuthority accepts host, host:port and [v6]:port.
func validAuthority(s string) bool {
	if len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte(".-_:[]", c) >= 0:
		default:
			return false
		}
	}
	return s != "" && s[0] != ':' && s[0] != '.'
}

func hasControlExceptTab(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return true
		}
	}
	return false
}

// rangeInt rejects an integer outside [lo, hi].
func (v *validator) rangeInt(path string, n, lo, hi int, hint string) {
	v.rangeInt64(path, int64(n), int64(lo), int64(hi), hint)
}

func (v *validator) rangeInt64(path string, n, lo, hi int64, hint string) {
	if n >= lo && n <= hi {
		return
	}
	msg := "must be between " + strconv.FormatInt(lo, 10) + " and " + strconv.FormatInt(hi, 10) +
		", got " + strconv.FormatInt(n, 10)
	if hint != "" {
		msg += " (" + hint + ")"
	}
	v.fail(path, msg)
}

// rangeMs rejects a millisecond duration outside [lo, hi].
func (v *validator) rangeMs(path string, ms *int64, lo, hi int64) {
	if ms == nil || (*ms >= lo && *ms <= hi) {
		return
	}
	v.fail(path, "must be between "+formatMs(lo)+" and "+formatMs(hi)+", got "+strconv.FormatInt(*ms, 10)+" ms")
}

// clampMs clamps a millisecond duration into [lo, hi], warning when it changes.
func (v *validator) clampMs(path string, ms *int64, lo, hi int64) {
	if ms == nil {
		return
	}
	orig := *ms
	switch {
	case orig < lo:
		*ms = lo
	case orig > hi:
		*ms = hi
	default:
		return
	}
	v.warn(path, "clamped "+strconv.FormatInt(orig, 10)+" ms to "+formatMs(*ms)+" (allowed "+formatMs(lo)+"–"+formatMs(hi)+")")
}

// clampInt clamps an integer into [lo, hi], warning when it changes.
func (v *validator) clampInt(path string, n *int, lo, hi int) {
	if n == nil {
		return
	}
	orig := *n
	switch {
	case orig < lo:
		*n = lo
	case orig > hi:
		*n = hi
	default:
		return
	}
	v.warn(path, "clamped "+strconv.Itoa(orig)+" to "+strconv.Itoa(*n)+" (allowed "+strconv.Itoa(lo)+"–"+strconv.Itoa(hi)+")")
}

// formatMs renders milliseconds for humans: 1 ms, 30 s, 10 min, 24 h, 7 days, 1500 ms.
func formatMs(ms int64) string {
	switch {
	case ms >= 2*86_400_000 && ms%86_400_000 == 0:
		return strconv.FormatInt(ms/86_400_000, 10) + " days"
	case ms != 0 && ms%3_600_000 == 0:
		return strconv.FormatInt(ms/3_600_000, 10) + " h"
	case ms != 0 && ms%60_000 == 0:
		return strconv.FormatInt(ms/60_000, 10) + " min"
	case ms != 0 && ms%1000 == 0:
		return strconv.FormatInt(ms/1000, 10) + " s"
	}
	return strconv.FormatInt(ms, 10) + " ms"
}
