// Package e2e is Spillway's end-to-end tests: the built filter behind a real HTTP front end
// (hostsim serve, or a real Envoy when ENVOY_BIN names one) in front of fake providers,
// driven over loopback by plain HTTP and by the providers' own SDKs (openai-go,
// anthropic-sdk-go). The harness is package e2e/internal/e2etest; the README says what
// each scenario proves.
package e2e
