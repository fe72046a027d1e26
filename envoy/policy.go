package envoy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// Policy is a policy ready to be turned into Envoy configuration: the JSON the filter
// receives as its plugin configuration (${NAME} references kept: the filter expands them
// from its VM environment), the parsed and validated policy, and the environment variables
// it reads.
type Policy struct {
	// JSON is the plugin configuration, indented for people reading the rendered file.
	JSON []byte
	// Parsed is the validated policy, its ${NAME} references expanded with placeholders
	// (or this process's environment, see LoadOptions.LookupEnv): the structure Envoy's
	// configuration is built from, never the values the filter will see.
	Parsed *policies.Policy
	// Resolved is Parsed with every setting at its effective value.
	Resolved *policies.Resolved
	// EnvKeys are the VM environment variables the filter reads for this policy, sorted:
	// every ${NAME} the policy references and the request-queue defaults
	// (policies.EnvRequestQueue*). They become the Wasm VM's host_env_keys.
	EnvKeys []string
}

// LoadOptions tune LoadPolicy.
type LoadOptions struct {
	// LookupEnv, when set, expands ${NAME} the way the filter will (e.g. os.LookupEnv on
	// the machine Envoy runs on, to check that every credential is set). Nil expands every
	// reference with a placeholder, which checks the policy's structure only.
	LookupEnv func(name string) (string, bool)
}

// envPlaceholder stands in for every ${NAME} when LoadOptions.LookupEnv is nil. Envoy's
// configuration is built before the VM environment exists, so a field the bootstrap is
// built from (a provider's cluster, authority, the cluster header) must be written
// literally: a placeholder showing up there is an error. It is a valid header value,
// cluster name and credential.
const envPlaceholder = "spillway-env-placeholder"

// LoadPolicy reads a YAML or JSON policy document, validates it as the filter will and
// returns it with the JSON the filter receives. Problems are policies.Errors (every problem
// with its field path).
func LoadPolicy(data []byte, opts LoadOptions) (*Policy, error) {
	doc, err := policyfile.ToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	queueVars := []string{policies.EnvRequestQueueMaxWait, policies.EnvRequestQueueExecutionMaxWait,
		policies.EnvRequestQueueMaxDepth}
	referenced := make(map[string]bool)
	lookup := func(name string) (string, bool) {
		referenced[name] = true
		switch {
		case opts.LookupEnv != nil:
			return opts.LookupEnv(name)
		case slices.Contains(queueVars, name):
			return "", false // numbers the filter reads when set: unset is the honest guess
		default:
			return envPlaceholder, true
		}
	}
	parsed, err := policies.Parse(doc, policies.ParseOptions{LookupEnv: lookup})
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	if opts.LookupEnv == nil {
		if err := literalFields(parsed); err != nil {
			return nil, fmt.Errorf("envoy: %w", err)
		}
	}
	if opts.LookupEnv == nil {
		parsed.Warnings = append(parsed.Warnings, literalSecrets(doc, parsed)...)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, doc, "", "  "); err != nil {
		return nil, fmt.Errorf("envoy: indent policy JSON: %w", err) // ToJSON returned valid JSON
	}
	// The request-queue defaults are read whether or not the policy mentions them.
	for _, name := range queueVars {
		referenced[name] = true
	}
	keys := make([]string, 0, len(referenced))
	for name := range referenced {
		keys = append(keys, name)
	}
	slices.Sort(keys)
	return &Policy{JSON: indented.Bytes(), Parsed: parsed, Resolved: parsed.Resolved(), EnvKeys: keys}, nil
}

// literalFields rejects an environment reference in the fields Envoy's configuration is
// built from: the bootstrap names clusters and the cluster header before any VM
// environment exists.
func literalFields(p *policies.Policy) error {
	var errs policies.Errors
	check := func(path, value string) {
		if strings.Contains(value, envPlaceholder) {
			errs = append(errs, policies.FieldError{Path: path,
				Message: "must be written literally, not from ${...}: Envoy's clusters and routes are built from it before the VM environment exists"})
		}
	}
	for i := range p.Providers {
		path := "providers[" + strconv.Itoa(i) + "]"
		check(path+".cluster", p.Providers[i].Cluster)
		check(path+".authority", p.Providers[i].Authority)
	}
	check("routing.clusterHeader", p.Routing.ClusterHeader)
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// literalSecrets warns about credentials written into the policy itself: they would sit in
// Envoy's configuration. A value that reads the same whatever the environment holds is
// literal; the policy is parsed once more with a second placeholder to tell.
func literalSecrets(doc []byte, first *policies.Policy) policies.Errors {
	other, err := policies.Parse(doc, policies.ParseOptions{LookupEnv: func(name string) (string, bool) {
		return envPlaceholder + "-2", true
	}})
	if err != nil {
		return nil // cannot happen for a document that parsed once; nothing to add
	}
	var out policies.Errors
	warn := func(path string, a, b policies.Secret) {
		if !a.IsZero() && a.Reveal() == b.Reveal() {
			out = append(out, policies.FieldError{Path: path,
				Message: "written literally: it would sit in Envoy's configuration; use ${NAME} and set NAME in Envoy's environment"})
		}
	}
	for i := range first.Providers {
		for j := range first.Providers[i].Connections {
			a, b := first.Providers[i].Connections[j].Credential, other.Providers[i].Connections[j].Credential
			if a != nil && b != nil {
				warn("providers["+strconv.Itoa(i)+"].connections["+strconv.Itoa(j)+"].credential.value", a.Value, b.Value)
			}
		}
	}
	warn("admin.token", first.Admin.Token, other.Admin.Token)
	return out
}

// AsFieldErrors returns the field problems inside err (policies.Errors), if any.
func AsFieldErrors(err error) (policies.Errors, bool) {
	var errs policies.Errors
	if errors.As(err, &errs) {
		return errs, true
	}
	return nil, false
}
