// Package lint finds what a valid policy can never do: routes no request reaches and
// providers no route sends to. Parse already rejects what is wrong and warns about what it
// changed; this is the rest of what `spillway lint` reports.
package lint

import (
	"strconv"
	"strings"

	"github.com/spillwayproxy/spillway/policies"
)

// Unserved lists the routes and providers of a validated policy that no request can
// reach, each with its field path and why, in document order.
func Unserved(p *policies.Policy) policies.Errors {
	var out policies.Errors
	res := p.Resolved()
	routedAPI := make(map[policies.API]bool)
	for _, api := range res.Routing.Paths {
		routedAPI[api] = true
	}
	used := make(map[int]bool) // providers a servable route sends to
	for i := range res.Routes {
		r := &res.Routes[i]
		path := "routes[" + strconv.Itoa(i) + "]"
		if j, ok := shadowedBy(res, i); ok {
			out = append(out, policies.FieldError{Path: path,
				Message: "never served: routes[" + strconv.Itoa(j) + "] (" + strconv.Quote(res.Routes[j].Model) +
					") comes first and matches every model " + strconv.Quote(r.Model) + " matches"})
			continue
		}
		if apis := routeAPIs(res, r); !anyRouted(apis, routedAPI) {
			out = append(out, policies.FieldError{Path: path,
				Message: "never served: its targets speak " + joinAPIs(apis) + ", and routing.paths routes no request of that API"})
			continue
		}
		for _, t := range r.Targets {
			used[t.Provider] = true
		}
	}
	for i := range res.Providers {
		if !used[i] {
			out = append(out, policies.FieldError{Path: "providers[" + strconv.Itoa(i) + "]",
				Message: "never used: no route that can be served has provider " + strconv.Quote(res.Providers[i].ID) + " as a target"})
		}
	}
	return out
}

// shadowedBy finds an earlier glob route that matches every model route i matches. An
// exact route is never shadowed (it wins over every glob). The test is sound but not
// complete: it recognises an earlier glob of the form "P*" (or "*S") against a later glob
// whose every match starts with P (ends with S).
func shadowedBy(res *policies.Resolved, i int) (int, bool) {
	r := &res.Routes[i]
	if !r.IsGlob {
		return 0, false
	}
	prefix, suffix := literalPrefix(r.Model), literalSuffix(r.Model)
	for j := range i {
		earlier := &res.Routes[j]
		if !earlier.IsGlob {
			continue
		}
		if p, ok := starSuffixed(earlier.Model); ok && strings.HasPrefix(prefix, p) {
			return j, true
		}
		if s, ok := starPrefixed(earlier.Model); ok && suffix != nil && strings.HasSuffix(*suffix, s) {
			return j, true
		}
	}
	return 0, false
}

// literalPrefix is the text every match of a glob starts with: the pattern up to its first
// unescaped '*', '?' or '['.
func literalPrefix(glob string) string {
	var b strings.Builder
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*', '?', '[':
			return b.String()
		case '\\':
			if i+1 < len(glob) {
				i++
				b.WriteByte(glob[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// literalSuffix is the text every match ends with, for globs without escapes or classes
// (nil when it cannot tell).
func literalSuffix(glob string) *string {
	if strings.ContainsAny(glob, `\[`) {
		return nil
	}
	s := glob[strings.LastIndexAny(glob, "*?")+1:]
	return &s
}

// starSuffixed reports whether glob is a literal followed by one '*' ("claude-*", "*"),
// returning the literal.
func starSuffixed(glob string) (string, bool) {
	lit, ok := strings.CutSuffix(glob, "*")
	return lit, ok && !strings.ContainsAny(lit, `*?[\`)
}

// starPrefixed reports whether glob is one '*' followed by a literal ("*-mini").
func starPrefixed(glob string) (string, bool) {
	lit, ok := strings.CutPrefix(glob, "*")
	return lit, ok && !strings.ContainsAny(lit, `*?[\`)
}

// routeAPIs lists the APIs a route's targets speak, in policies.APIs order.
func routeAPIs(res *policies.Resolved, r *policies.ResolvedRoute) []policies.API {
	speaks := make(map[policies.API]bool)
	for _, t := range r.Targets {
		if t.Provider >= 0 {
			speaks[res.Providers[t.Provider].API] = true
		}
	}
	var out []policies.API
	for _, api := range policies.APIs {
		if speaks[api] {
			out = append(out, api)
		}
	}
	return out
}

func anyRouted(apis []policies.API, routed map[policies.API]bool) bool {
	for _, api := range apis {
		if routed[api] {
			return true
		}
	}
	return false
}

func joinAPIs(apis []policies.API) string {
	names := make([]string, len(apis))
	for i, a := range apis {
		names[i] = string(a)
	}
	return strings.Join(names, " and ")
}
