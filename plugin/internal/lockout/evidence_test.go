package lockout

import (
	"fmt"
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
)

func TestEvidenceOfAFailure(t *testing.T) {
	cases := []struct {
		reason failure.Reason // the failure's classification
		served bool           // the worker saw the provider serve the model
		want   Evidence
	}{
		{failure.ReasonNotFound, true, EvidenceServed}, // a success outranks whatever failed since
		{failure.ReasonServerError, true, EvidenceServed},
		{failure.ReasonRateLimit, false, EvidenceMetered},
		{failure.ReasonQuotaExhausted, false, EvidenceMetered},
		{failure.ReasonConcurrencyLimited, false, EvidenceMetered},
		{failure.ReasonModelCapacity, false, EvidenceMetered},
		{failure.ReasonNotFound, false, EvidenceNone},
		{failure.ReasonBadRequest, false, EvidenceNone},
		{failure.ReasonAuthError, false, EvidenceNone},
		{failure.ReasonServerError, false, EvidenceNone},
		{failure.ReasonTimeout, false, EvidenceNone},
		{failure.ReasonStreamTruncated, false, EvidenceNone},
		{failure.ReasonUnknown, false, EvidenceNone},
	}
	for _, c := range cases {
		if got := EvidenceOf(c.reason, c.served); got != c.want {
			t.Errorf("EvidenceOf(%s, served=%v) = %d, want %d", c.reason, c.served, got, c.want)
		}
	}
}

func TestServedRemembersTheModelsInUse(t *testing.T) {
	var s Served
	if s.Has("m") {
		t.Fatal("the zero Served remembers a model")
	}
	for i := range ServedMemory {
		s.Note(fmt.Sprintf("m%02d", i))
	}
	for i := range ServedMemory {
		if !s.Has(fmt.Sprintf("m%02d", i)) {
			t.Fatalf("m%02d forgotten with the memory not yet full", i)
		}
	}
	// A model served again and again stays, however many others are served meanwhile; the
	// others are forgotten least recently served first.
	for i := range 10 * ServedMemory {
		s.Note("in-use")
		s.Note(fmt.Sprintf("other%03d", i))
	}
	if !s.Has("in-use") {
		t.Fatal("the model in use was forgotten")
	}
	if s.Has("m00") || s.Has("other000") {
		t.Fatal("the least recently served models are still remembered")
	}
	if !s.Has(fmt.Sprintf("other%03d", 10*ServedMemory-1)) {
		t.Fatal("the latest model served is not remembered")
	}
	if s.Has("never-served") {
		t.Fatal("a model never served is remembered")
	}
}

func BenchmarkServedNote(b *testing.B) {
	var s Served
	for i := range ServedMemory {
		s.Note(fmt.Sprintf("m%02d", i))
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Note("claude-sonnet-4-5-20250929")
	}
}
