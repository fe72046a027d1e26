package istio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	extensionsapi "istio.io/api/extensions/v1alpha1"
	networkingv1alpha3api "istio.io/api/networking/v1alpha3"
	clientextensions "istio.io/client-go/pkg/apis/extensions/v1alpha1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	clientnetworkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Object is one Kubernetes resource: an Istio resource (Spec set) or a ConfigMap (Data
// set).
type Object struct {
	APIVersion string
	Kind       string
	Name       string
	Namespace  string
	Labels     map[string]string
	// Spec is the istio.io/api message of an Istio resource.
	Spec proto.Message
	// Data is a ConfigMap's data.
	Data map[string]string
}

// ID names the object in messages: "Kind namespace/name".
func (o *Object) ID() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// kindInfo is what Spillway knows of a resource kind: its API version and its spec type,
// and the client-go type the same document must decode into.
type kindInfo struct {
	apiVersion string
	newSpec    func() proto.Message
	// clientSpec decodes the document with client-go's types (the istio.io/api JSON
	// unmarshalers kubectl and istioctl use) and returns its spec.
	clientSpec func(doc []byte) (proto.Message, error)
}

var kinds = map[string]kindInfo{
	"ServiceEntry": {clientnetworkingv1.SchemeGroupVersion.String(), func() proto.Message { return new(networkingv1alpha3api.ServiceEntry) },
		func(doc []byte) (proto.Message, error) {
			var o clientnetworkingv1.ServiceEntry
			return &o.Spec, json.Unmarshal(doc, &o)
		}},
	"DestinationRule": {clientnetworkingv1.SchemeGroupVersion.String(), func() proto.Message { return new(networkingv1alpha3api.DestinationRule) },
		func(doc []byte) (proto.Message, error) {
			var o clientnetworkingv1.DestinationRule
			return &o.Spec, json.Unmarshal(doc, &o)
		}},
	"VirtualService": {clientnetworkingv1.SchemeGroupVersion.String(), func() proto.Message { return new(networkingv1alpha3api.VirtualService) },
		func(doc []byte) (proto.Message, error) {
			var o clientnetworkingv1.VirtualService
			return &o.Spec, json.Unmarshal(doc, &o)
		}},
	"Gateway": {clientnetworkingv1.SchemeGroupVersion.String(), func() proto.Message { return new(networkingv1alpha3api.Gateway) },
		func(doc []byte) (proto.Message, error) {
			var o clientnetworkingv1.Gateway
			return &o.Spec, json.Unmarshal(doc, &o)
		}},
	"EnvoyFilter": {clientnetworkingv1alpha3.SchemeGroupVersion.String(), func() proto.Message { return new(networkingv1alpha3api.EnvoyFilter) },
		func(doc []byte) (proto.Message, error) {
			var o clientnetworkingv1alpha3.EnvoyFilter
			return &o.Spec, json.Unmarshal(doc, &o)
		}},
	"WasmPlugin": {clientextensions.SchemeGroupVersion.String(), func() proto.Message { return new(extensionsapi.WasmPlugin) },
		func(doc []byte) (proto.Message, error) {
			var o clientextensions.WasmPlugin
			return &o.Spec, json.Unmarshal(doc, &o)
		}},
	"TrafficExtension": {clientextensions.SchemeGroupVersion.String(), func() proto.Message { return new(extensionsapi.TrafficExtension) },
		func(doc []byte) (proto.Message, error) {
			var o clientextensions.TrafficExtension
			return &o.Spec, json.Unmarshal(doc, &o)
		}},
	"ConfigMap": {"v1", nil, nil},
}

// specJSON writes specs the way Istio's CRDs read them: lowerCamelCase field names,
// enums by name.
var specJSON = protojson.MarshalOptions{}

// EncodeYAML writes the objects as one multi-document YAML stream, in order.
func EncodeYAML(objects []Object) ([]byte, error) {
	var out bytes.Buffer
	for i := range objects {
		doc, err := encodeObject(&objects[i])
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(doc)
	}
	return out.Bytes(), nil
}

func encodeObject(o *Object) ([]byte, error) {
	meta := map[string]any{"name": o.Name, "namespace": o.Namespace}
	if len(o.Labels) > 0 {
		meta["labels"] = o.Labels
	}
	doc := map[string]any{"apiVersion": o.APIVersion, "kind": o.Kind, "metadata": meta}
	switch {
	case o.Spec != nil:
		spec, err := specJSON.Marshal(o.Spec)
		if err != nil {
			return nil, fmt.Errorf("istio: %s: %w", o.ID(), err)
		}
		doc["spec"] = json.RawMessage(spec)
	case o.Data != nil:
		doc["data"] = o.Data
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("istio: %s: %w", o.ID(), err)
	}
	out, err := yaml.JSONToYAML(js)
	if err != nil {
		return nil, fmt.Errorf("istio: %s: %w", o.ID(), err)
	}
	return out, nil
}

// envelope is a document's outer shape, decoded strictly.
type envelope struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       json.RawMessage   `json:"spec"`
	Data       map[string]string `json:"data"`
}

// DecodeYAML reads a multi-document YAML stream strictly: unknown or duplicate fields
// anywhere (metadata included), unknown kinds and API versions, and specs that the
// istio.io/api types reject are errors, each naming its document. Every Istio document
// must also decode to the same spec with istio.io/client-go's types, as kubectl's and
// istioctl's clients read it.
func DecodeYAML(data []byte) ([]Object, error) {
	var objects []Object
	var errs []error
	for i, raw := range splitDocuments(data) {
		o, err := decodeObject(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i+1, err))
			continue
		}
		objects = append(objects, *o)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("istio: %w", errors.Join(errs...))
	}
	return objects, nil
}

func decodeObject(raw []byte) (*Object, error) {
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	info, ok := kinds[env.Kind]
	if !ok {
		return nil, fmt.Errorf("kind %q: not a kind Spillway's Istio manifests use (%s)", env.Kind, strings.Join(slices.Sorted(maps.Keys(kinds)), ", "))
	}
	if env.APIVersion != info.apiVersion {
		return nil, fmt.Errorf("%s: apiVersion %q: want %q", env.Kind, env.APIVersion, info.apiVersion)
	}
	o := &Object{APIVersion: env.APIVersion, Kind: env.Kind, Name: env.Metadata.Name, Namespace: env.Metadata.Namespace, Labels: env.Metadata.Labels}
	if info.newSpec == nil {
		if env.Spec != nil {
			return nil, fmt.Errorf("%s: a ConfigMap has data, not spec", o.ID())
		}
		o.Data = env.Data
		return o, nil
	}
	if env.Data != nil {
		return nil, fmt.Errorf("%s: unknown field \"data\"", o.ID())
	}
	if env.Spec == nil {
		return nil, fmt.Errorf("%s: spec: required", o.ID())
	}
	o.Spec = info.newSpec()
	if err := protojson.Unmarshal(env.Spec, o.Spec); err != nil {
		return nil, fmt.Errorf("%s: spec: %w", o.ID(), err)
	}
	clientSpec, err := info.clientSpec(js)
	if err != nil {
		return nil, fmt.Errorf("%s: istio.io/client-go cannot decode it: %w", o.ID(), err)
	}
	if !proto.Equal(clientSpec, o.Spec) {
		return nil, fmt.Errorf("%s: istio.io/client-go reads its spec differently from istio.io/api's protojson", o.ID())
	}
	return o, nil
}

// splitDocuments splits a YAML stream at its "---" lines, dropping empty documents.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if len(bytes.TrimSpace(stripComments(cur.Bytes()))) > 0 {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for line := range bytes.Lines(data) {
		if t := bytes.TrimRight(line, " \t\r\n"); bytes.Equal(t, []byte("---")) || bytes.HasPrefix(t, []byte("--- ")) {
			flush()
			continue
		}
		cur.Write(line)
	}
	flush()
	return docs
}

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for line := range bytes.Lines(doc) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out.Write(line)
		}
	}
	return out.Bytes()
}
