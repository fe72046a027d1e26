package policies

import (
	"testing"
)

// benchResolved resolves a policy with exact and glob routes.
func benchResolved(b *testing.B) *Resolved {
	b.Helper()
	p, err := Parse([]byte(`{"providers":[{"id":"p","cluster":"c","quotaFamilies":{"gpt-5*":"gpt-5"},"connections":[{"id":"a"}]}],
	 "routes":[{"model":"gpt-4o","targets":[{"provider":"p"}]},{"model":"claude-3-*","targets":[{"provider":"p"}]},
	  {"model":"claude-*","targets":[{"provider":"p"}]},{"model":"*","targets":[{"provider":"p"}]}],
	 "resilience":{"statusRestatement":[{"id":"r","provider":"p","fromStatuses":[400,403],"toStatus":429,
	  "textMarkers":["用户额度不足","额度不足"],"excludeMarkers":["无权访问模型"]}]}}`), ParseOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return p.Resolved()
}

func BenchmarkRouteExact(b *testing.B) {
	r := benchResolved(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := r.Route("gpt-4o"); !ok {
			b.Fatal("no route")
		}
	}
}

func BenchmarkRouteGlob(b *testing.B) {
	r := benchResolved(b)
	b.ReportAllocs()
	for b.Loop() {
		if route, ok := r.Route("claude-sonnet-4-20250514"); !ok || route.Model != "claude-*" {
			b.Fatal("wrong route")
		}
	}
}

func BenchmarkQuotaFamily(b *testing.B) {
	r := benchResolved(b)
	p := &r.Providers[0]
	b.ReportAllocs()
	for b.Loop() {
		if p.QuotaFamily("gpt-5.1-codex") != "gpt-5" {
			b.Fatal("wrong family")
		}
	}
}

func BenchmarkParseRich(b *testing.B) {
	data := []byte(richBase)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, ParseOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResolveRich(b *testing.B) {
	p, err := Parse([]byte(richBase), ParseOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Resolved()
	}
}
