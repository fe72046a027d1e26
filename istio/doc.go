// Package istio renders a Spillway policy into the Istio resources that run the filter in
// a mesh (EnvoyFilter with ECDS, or WasmPlugin/TrafficExtension; ServiceEntry,
// DestinationRule and VirtualService per provider) and validates such manifests in-process:
// strict decoding, Envoy's rules on the patch values, Spillway's invariants (istiod's own
// rules are istioctl's, in make istio-check).
package istio
