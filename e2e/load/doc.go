// Package load is the load, fault and soak test of the built filter through `hostsim
// serve`: many concurrent clients, a seeded mix of successes, 429s, 5xx, slow streams and
// streams the client walks away from, and one 5xx storm that opens a provider's breaker.
//
// What it proves (TestLoad; `make soak` runs it for minutes instead of a request count):
//
//   - every request gets exactly one well-formed answer whose status is one its kind may
//     have (a parsable JSON body or an event stream that ends with its terminal event,
//     with the x-spillway-* headers), and exactly one access line that agrees with it;
//     nothing is lost or duplicated: the fakes received exactly the upstream attempts the
//     answers report, and the filter counted exactly the streams that were sent;
//   - an OPEN provider receives only its probes: after the storm the breaker lets nothing
//     through for its OPEN period, then exactly one probe, and again after a failed probe
//     (the periods come from the policy's breaker settings);
//   - nothing is left behind: no stream in any VM, no concurrency slot or queued request
//     in the admin API's health, no request in flight at any fake;
//   - memory levels off: each VM's linear memory grows by at most a stated bound over the
//     second half of the run, and shared data stops gaining keys.
//
// BenchmarkLoad measures the same front end with a success-only mix against build/noop.wasm
// in the same run: requests per second and the p50/p99 latency Spillway adds.
//
// The package is tests only; the policy is testdata/load.yaml.
package load
