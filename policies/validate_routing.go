package policies

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Bounds on routing (Spillway's own): the path table stays small enough that matching a
// request path is one map lookup, and a cluster header name stays an ordinary header name.
const (
	maxRoutingPaths       = 32  // per API
	maxRoutingPathBytes   = 256 // per path
	maxClusterHeaderBytes = 128
)

// wellKnownCredentialHeaders are the headers providers read credentials from. The cluster
// header must never be one of them: Spillway would overwrite a credential with a cluster
// name (or send a cluster name where a key belongs).
var wellKnownCredentialHeaders = []string{"authorization", "x-api-key", "api-key", "x-goog-api-key"}

// routing checks the routing block. It runs after providers and admin, whose credential
// headers and admin prefix it must not collide with.
func (v *validator) routing(r *Routing, path string) {
	v.clusterHeader(r, joinField(path, "clusterHeader"))
	pp := joinField(path, "paths")
	// A list left unset keeps its default paths, which an operator's list must not repeat
	// either: one path, one API.
	seen := make(map[string]string)
	for _, api := range APIs {
		if r.Paths.forAPI(api) == nil {
			for _, p := range RoutingDefaultPaths[api] {
				seen[p] = "the default " + joinField(pp, string(api)) + "; set that list to change it"
			}
		}
	}
	v.routingPaths(joinField(pp, string(APIOpenAI)), r.Paths.OpenAI, seen)
	v.routingPaths(joinField(pp, string(APIAnthropic)), r.Paths.Anthropic, seen)
	v.rangeMs(joinField(path, "bodyWaitMs"), r.BodyWaitMs, msSecond, 10*msMinute)
	v.unroutedProviders(r)
}

func (v *validator) clusterHeader(r *Routing, hp string) {
	if r.ClusterHeader == "" {
		return // unset: the default
	}
	name := r.ClusterHeader
	lower := strings.ToLower(name)
	switch {
	case strings.HasPrefix(name, ":"):
		v.fail(hp, "pseudo header "+v.quote(hp, name)+" cannot name the cluster (want an ordinary header such as x-spillway-cluster)")
		return
	case !isHTTPToken(name):
		v.fail(hp, "invalid header name "+v.quote(hp, name)+" (want an HTTP token such as x-spillway-cluster)")
		return
	case len(name) > maxClusterHeaderBytes:
		v.fail(hp, "header name is longer than "+strconv.Itoa(maxClusterHeaderBytes)+" characters")
		return
	case forbiddenCredentialHeaders[lower] && !contains(SessionAffinityHeaders, lower):
		v.fail(hp, "header "+v.quote(hp, name)+" is a hop-by-hop, framing or routing header the proxy owns")
		return
	case contains(wellKnownCredentialHeaders, lower):
		v.fail(hp, "header "+v.quote(hp, name)+" carries credentials; the cluster needs a header of its own")
		return
	case contains(SessionAffinityHeaders, lower):
		v.fail(hp, "header "+v.quote(hp, name)+" is a session header (read for session affinity and never forwarded)")
		return
	case contains(ResponseHeaders, lower):
		v.fail(hp, "header "+v.quote(hp, name)+" is one of Spillway's response headers")
		return
	case strings.HasPrefix(lower, "x-envoy-"):
		v.fail(hp, "header "+v.quote(hp, name)+" is in Envoy's reserved x-envoy- namespace")
		return
	}
	for pi := range v.p.Providers {
		pr := &v.p.Providers[pi]
		for ci := range pr.Connections {
			if cr := pr.Connections[ci].Credential; cr != nil && strings.EqualFold(cr.Header, lower) {
				v.fail(hp, "header "+v.quote(hp, name)+" is the credential header of providers["+strconv.Itoa(pi)+
					"].connections["+strconv.Itoa(ci)+"]; the cluster needs a header of its own")
				return
			}
		}
	}
	r.ClusterHeader = lower // Envoy header maps are lower-case
}

// routingPaths checks one API's path list; seen maps each path to where it was first
// listed, across both lists.
func (v *validator) routingPaths(path string, paths []string, seen map[string]string) {
	if len(paths) > maxRoutingPaths {
		v.fail(path, "at most "+strconv.Itoa(maxRoutingPaths)+" paths, got "+strconv.Itoa(len(paths)))
	}
	admin := stringOr(v.p.Admin.PathPrefix, AdminPathPrefix)
	for i, p := range paths {
		ip := joinIndex(path, i)
		switch {
		case !strings.HasPrefix(p, "/"):
			v.fail(ip, "path "+v.quote(ip, p)+" must start with '/'")
			continue
		case len(p) > maxRoutingPathBytes:
			v.fail(ip, "path is longer than "+strconv.Itoa(maxRoutingPathBytes)+" bytes")
			continue
		case strings.ContainsAny(p, "?#"):
			v.fail(ip, "path "+v.quote(ip, p)+" must not contain a query or fragment ('?' or '#'): the query string is ignored when matching")
			continue
		case hasControl(p) || strings.ContainsRune(p, ' '):
			v.fail(ip, "path must not contain spaces or control characters")
			continue
		case strings.HasPrefix(p, admin):
			v.fail(ip, "path "+v.quote(ip, p)+" is under the admin API's prefix "+strconv.Quote(admin))
			continue
		}
		if prev, dup := seen[p]; dup {
			v.fail(ip, "duplicate path "+v.quote(ip, p)+" (also "+prev+"); a path belongs to one API")
			continue
		}
		seen[p] = ip
	}
}

// unroutedProviders warns about providers whose API has no routed paths: no request can
// ever reach them.
func (v *validator) unroutedProviders(r *Routing) {
	for i := range v.p.Providers {
		pr := &v.p.Providers[i]
		api := providerAPI(pr)
		if !validAPI(api) {
			continue // already reported
		}
		if paths := r.Paths.forAPI(api); paths != nil && len(paths) == 0 {
			v.warn(joinField(joinIndex("providers", i), "api"), "routing.paths."+string(api)+
				" is empty, so no request reaches this "+string(api)+" provider")
		}
	}
}

// forAPI returns the configured list of one API (nil = unset, the default applies).
func (p *RoutingPaths) forAPI(api API) []string {
	if api == APIAnthropic {
		return p.Anthropic
	}
	return p.OpenAI
}

// Offsets of real time zones run from UTC-12:00 to UTC+14:00.
const (
	minZoneOffset = -12 * 3600
	maxZoneOffset = 14 * 3600
)

// parseFixedZone reads resilience.quotaResetTimeZone: "UTC" or a fixed offset ±HH:MM.
func parseFixedZone(s string) (*time.Location, error) {
	if s == "UTC" || s == "" {
		return time.UTC, nil
	}
	if len(s) != 6 || (s[0] != '+' && s[0] != '-') || s[3] != ':' {
		return nil, errors.New("want UTC or a fixed offset ±HH:MM such as +08:00 (IANA names are not supported)")
	}
	hours, okH := twoDigits(s[1:3])
	minutes, okM := twoDigits(s[4:6])
	if !okH || !okM || minutes > 59 {
		return nil, errors.New("want UTC or a fixed offset ±HH:MM such as +08:00 (IANA names are not supported)")
	}
	offset := hours*3600 + minutes*60
	if s[0] == '-' {
		offset = -offset
	}
	if offset < minZoneOffset || offset > maxZoneOffset {
		return nil, errors.New("offset must be between -12:00 and +14:00")
	}
	if offset == 0 {
		return time.UTC, nil
	}
	return time.FixedZone(s, offset), nil
}

func twoDigits(s string) (int, bool) {
	if len(s) != 2 || s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9' {
		return 0, false
	}
	return int(s[0]-'0')*10 + int(s[1]-'0'), true
}
