package policies

import "reflect"

// MaxPolicyBytes bounds the size of a policy document.
const MaxPolicyBytes = 4 << 20

// ParseOptions tune Parse.
type ParseOptions struct {
	// LookupEnv resolves ${NAME} in string values (the VM environment in the filter,
	// os.LookupEnv in tools). Nil means no environment: any ${NAME} without a default is
	// an error.
	LookupEnv func(name string) (string, bool)
}

// Parse reads a JSON policy strictly: unknown fields, duplicate keys and wrong types are
// errors with their field paths; ${ENV} is expanded in string values; out-of-range numbers
// are clamped (listed in Policy.Warnings) or rejected as documented on each field; then the
// whole policy is validated. For invalid input it returns Errors listing every problem.
// Read YAML with policies/policyfile.
func Parse(data []byte, opts ParseOptions) (*Policy, error) {
	if len(data) > MaxPolicyBytes {
		return nil, Errors{{Message: "policy is larger than 4 MiB"}}
	}
	tree, err := parseTree(data)
	if err != nil {
		return nil, Errors{{Message: err.Error()}}
	}
	if tree.kind != objectNode {
		return nil, Errors{{Message: "expected an object, got " + tree.describe()}}
	}
	d := newDecoder(opts.LookupEnv)
	p := new(Policy)
	d.decode(tree, reflect.ValueOf(p).Elem(), "")
	v := newValidator(p, d.fromEnv, d.failed)
	v.errs = d.errs
	p.envQueue = readEnvQueue(opts.LookupEnv, v.warn)
	v.requestQueue(&p.envQueue, "")
	v.run()
	if len(v.errs) > 0 {
		return nil, v.errs
	}
	p.Warnings = v.warnings
	return p, nil
}

// Validate checks a policy built in Go (Parse already does this): it applies the same clamps
// (recording them in p.Warnings) and returns Errors listing every problem, or nil.
func (p *Policy) Validate() error {
	v := newValidator(p, nil, nil)
	v.run()
	p.Warnings = v.warnings
	if len(v.errs) > 0 {
		return v.errs
	}
	return nil
}
