// Package policyfile reads Spillway policy files, YAML or JSON, into policies.Policy: YAML
// is converted to JSON and then goes through the same strict parser the plugin uses, so a
// file and the plugin configuration made from it can never be read differently.
package policyfile

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/spillwayproxy/spillway/policies"
)

// ToJSON converts a YAML or JSON policy document to the JSON the plugin receives as its
// configuration. ${ENV} references are kept: the filter expands them from its own VM
// environment. Duplicate keys are an error. A problem is reported as policies.Errors.
func ToJSON(data []byte) ([]byte, error) {
	if len(data) > policies.MaxPolicyBytes {
		return nil, policies.Errors{{Message: "policy is larger than 4 MiB"}}
	}
	if doc, ok := jsonObject(data); ok {
		return doc, nil
	}
	out, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, policies.Errors{{Message: "invalid YAML: " + cleanYAMLError(err)}}
	}
	if bytes.Equal(bytes.TrimSpace(out), []byte("null")) {
		return nil, policies.Errors{{Message: "empty policy document"}}
	}
	return out, nil
}

// Parse reads a YAML or JSON policy (see ToJSON and policies.Parse).
func Parse(data []byte, opts policies.ParseOptions) (*policies.Policy, error) {
	doc, err := ToJSON(data)
	if err != nil {
		return nil, err
	}
	return policies.Parse(doc, opts)
}

// Load reads and parses a policy file.
func Load(path string, opts policies.ParseOptions) (*policies.Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policyfile: %w", err)
	}
	p, err := Parse(data, opts)
	if err != nil {
		return nil, fmt.Errorf("policyfile: %s: %w", path, err)
	}
	return p, nil
}

// OSEnv returns ParseOptions that expand ${ENV} from this process's environment, for tools
// that check a policy the way the filter will read it.
func OSEnv() policies.ParseOptions {
	return policies.ParseOptions{LookupEnv: os.LookupEnv}
}

// jsonObject returns data without a UTF-8 byte order mark if it is a JSON object (its first
// non-blank byte is '{'). JSON goes straight to the JSON parser, whose syntax errors carry
// line and column.
func jsonObject(data []byte) ([]byte, bool) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	return data, len(trimmed) > 0 && trimmed[0] == '{'
}

// cleanYAMLError drops the library's generic prefixes, keeping "line N: what".
func cleanYAMLError(err error) string {
	msg := err.Error()
	for _, prefix := range []string{"error converting YAML to JSON: ", "yaml: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	if msg == "" {
		return "syntax error"
	}
	return msg
}
