package engine

import (
	"reflect"
	"slices"
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/policies/examples"
)

func TestPreviewClassifiesAsRecordWouldAndRecordsNothing(t *testing.T) {
	tests := []struct {
		name     string         // the outcome
		o        Outcome        // what came back
		fallback bool           // the verdict says fail over
		reason   failure.Reason // the verdict's reason
	}{
		{"429 with Retry-After, headers only", Outcome{Status: 429, Headers: [][2]string{{"retry-after", "30"}}}, true, failure.ReasonRateLimit},
		{"503, headers only", Outcome{Status: 503}, true, failure.ReasonServerError},
		{"400, headers only", Outcome{Status: 400}, false, failure.ReasonBadRequest},
		// The same status with its error body is another verdict: what header mode cannot see.
		{"429 whose body says the credits are gone", Outcome{Status: 429,
			Body: []byte(`{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`)},
			true, failure.ReasonCreditsExhausted},
		{"transport failure", Outcome{Status: 0, Message: "reset"}, true, failure.ReasonTransport},
		{"success", Outcome{Status: 200}, false, failure.ReasonNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, examples.Demo())
			p := f.plan(t, "gpt-4o", affinity.Key{})
			before := f.names(p)
			d, err := f.e.Dispatch(p.Targets[0])
			if err != nil {
				t.Fatal(err)
			}
			v, rs := f.e.Preview(d, tt.o)
			if v.Fallback != tt.fallback || v.Reason != tt.reason {
				t.Fatalf("preview: fallback %v reason %q, want %v %q", v.Fallback, v.Reason, tt.fallback, tt.reason)
			}
			// Nothing was recorded: the attempt's slots given back, the next plan is the same
			// and Record then finds the same verdict.
			if _, err := f.e.Abandon(d); err != nil {
				t.Fatal(err)
			}
			if again := f.names(f.plan(t, "gpt-4o", affinity.Key{})); !slices.Equal(again, before) {
				t.Fatalf("plan after a preview %v, want %v: the preview recorded something", again, before)
			}
			d, err = f.e.Dispatch(f.plan(t, "gpt-4o", affinity.Key{}).Targets[0])
			if err != nil {
				t.Fatal(err)
			}
			r := f.e.Record(d, tt.o, nil)
			if !reflect.DeepEqual(r.Verdict, v) || !reflect.DeepEqual(r.Restatement, rs) {
				t.Fatalf("Record found %+v %+v, the preview %+v %+v", r.Verdict, r.Restatement, v, rs)
			}
		})
	}
}
