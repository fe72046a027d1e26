// Package istio renders a Spillway policy into the Istio resources that run the filter in
// a mesh (EnvoyFilter with ECDS, or WasmPlugin/TrafficExtension; ServiceEntry,
// DestinationRule and VirtualService per provider) and validates such manifests with
// istio.io/api types and the rules istiod enforces.
package istio
