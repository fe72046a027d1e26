package envoy

import (
	"bytes"
	"fmt"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	sigsyaml "sigs.k8s.io/yaml"
)

// MarshalYAML writes a configuration message as Envoy reads it (-c file.yaml): proto field
// names, fields in proto order, multi-line strings (the policy JSON) as literal blocks.
// The output is stable for one version of the protos.
func MarshalYAML(m proto.Message) ([]byte, error) {
	// protojson varies its whitespace on purpose; the YAML round trip below normalises it.
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(js, &doc); err != nil { // JSON is YAML; a Node keeps key order
		return nil, fmt.Errorf("envoy: %w", err)
	}
	blockStyle(&doc)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	return out.Bytes(), nil
}

// blockStyle turns the JSON's flow style into YAML's block style; the encoder quotes a
// string wherever plain text would read as another type.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && strings.Contains(n.Value, "\n") {
		n.Style = yaml.LiteralStyle
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// UnmarshalYAML reads a configuration written by MarshalYAML (or by hand) strictly:
// unknown fields are errors. The types of its Any fields must be linked in.
func UnmarshalYAML(data []byte, m proto.Message) error {
	js, err := sigsyaml.YAMLToJSONStrict(data)
	if err != nil {
		return fmt.Errorf("envoy: %w", err)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		return fmt.Errorf("envoy: %w", err)
	}
	return nil
}
