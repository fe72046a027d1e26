// Package policies is Spillway's typed policy (plugin configuration): the model, its
// defaults, JSON parsing with field-path errors, validation and the resolved view. It is pure
// Go, shared by the plugin, hostsim, envoy and istio so their configurations cannot drift.
//
// Flow: Parse (JSON, strict: unknown fields, duplicate keys and wrong types are errors with
// their path; ${ENV} expands in string values) → validation and clamps (every problem at
// once, as Errors; clamps listed in Policy.Warnings) → Policy.Resolved (every setting at its
// effective value, defaults from defaults.go per provider profile). YAML files go through
// policies/policyfile; the JSON Schema for editors (spillway.schema.json) and the field
// reference (REFERENCE.md) are generated from this model by policies/schema;
// policies/examples embeds the example policies.
package policies

//go:generate go run ./schema/cmd/spillway-schema -dir . -o spillway.schema.json -md REFERENCE.md
