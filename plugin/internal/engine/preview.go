package engine

import (
	"github.com/spillwayproxy/spillway/plugin/internal/classify"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/restate"
)

// Preview classifies an attempt's outcome exactly as Record would, and records nothing: no
// layer is written, no probe released, the request's memory is untouched. A caller that
// must decide before it can see the whole outcome — the filter's header-routed mode, which
// sees a failed response's status and headers long before its error body, and must choose
// then between failing over and letting the response through — previews the headers, and
// records once: the headers alone when it fails over, the body too when the response went
// on. A status below 400 previews as Record reports a success: a zero verdict.
func (e *Engine) Preview(d Dispatch, o Outcome) (failure.Verdict, restate.Result) {
	if o.Status > 0 && o.Status < 400 {
		return failure.Verdict{}, restate.Result{}
	}
	pv := &e.providers[d.Target.Provider]
	return e.classifier.Classify(classify.Input{Provider: pv.res.ID, Profile: pv.res.Profile,
		Status: o.Status, TimedOut: o.TimedOut, Headers: o.Headers, Body: o.Body, Now: e.now(), Sent: o.Sent})
}
