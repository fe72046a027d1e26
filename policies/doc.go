// Package policies is Spillway's typed policy (plugin configuration): the model, its
// defaults, JSON parsing with field-path errors, validation and the JSON Schema. It is pure
// Go, shared by the plugin, hostsim, envoy and istio so their configurations cannot drift.
package policies
