package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/istio"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoyrelease"
	"github.com/spillwayproxy/spillway/policies/examples"
)

// newFlagSet is a flag set that reports errors to stderr and never exits.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; ok false means the caller returns code.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

// moduleFlags are how Envoy gets the filter: the module and its failure policy (render
// and xds share them, so a control plane serves what the bootstrap was rendered with).
type moduleFlags struct {
	path, url, sha256 string
	failure           failurePolicyFlag
}

func (m *moduleFlags) register(fs *flag.FlagSet) {
	m.failure = failurePolicyFlag(envoy.DefaultFailurePolicy)
	fs.StringVar(&m.path, "wasm", envoy.DefaultModulePath, "the module's path on the Envoy host (`FILE`)")
	fs.StringVar(&m.url, "wasm-url", "", "fetch the module from this `URL` instead of -wasm (needs -wasm-sha256)")
	fs.StringVar(&m.sha256, "wasm-sha256", "", "the module's sha256 (`HEX`; sha256sum build/spillway.wasm)")
	fs.Var(&m.failure, "failure-policy", "what Envoy does after a VM failure, `POLICY`: fail-reload (a fresh VM), fail-closed (503), fail-open (skip the filter)")
}

func (m *moduleFlags) module() envoy.Module {
	if m.url != "" {
		return envoy.Module{URL: m.url, SHA256: strings.ToLower(m.sha256)}
	}
	return envoy.Module{Path: m.path, SHA256: strings.ToLower(m.sha256)}
}

// failurePolicyFlag reads fail-reload, fail-closed or fail-open.
type failurePolicyFlag wasmv3.FailurePolicy

var failurePolicies = map[string]wasmv3.FailurePolicy{
	"fail-reload": wasmv3.FailurePolicy_FAIL_RELOAD,
	"fail-closed": wasmv3.FailurePolicy_FAIL_CLOSED,
	"fail-open":   wasmv3.FailurePolicy_FAIL_OPEN,
}

func (f *failurePolicyFlag) String() string {
	for name, p := range failurePolicies {
		if p == wasmv3.FailurePolicy(*f) {
			return name
		}
	}
	return ""
}

func (f *failurePolicyFlag) Set(s string) error {
	p, ok := failurePolicies[s]
	if !ok {
		return errors.New("want fail-reload, fail-closed or fail-open")
	}
	*f = failurePolicyFlag(p)
	return nil
}

// clusterFlags collect -cluster NAME=URL.
type clusterFlags map[string]string

func (c clusterFlags) String() string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n+"="+c[n])
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func (c clusterFlags) Set(s string) error {
	name, url, ok := strings.Cut(s, "=")
	if !ok || name == "" || url == "" {
		return errors.New("want NAME=URL, e.g. openai=https://api.openai.com")
	}
	if _, dup := c[name]; dup {
		return fmt.Errorf("cluster %q given twice", name)
	}
	c[name] = url
	return nil
}

// readPolicy reads a policy file, or the embedded demo policy for "".
func readPolicy(path string) (data []byte, name string, err error) {
	if path == "" {
		return examples.Demo(), "the embedded demo policy (policies/examples/demo.yaml)", nil
	}
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	return data, path, nil
}

// printProblems writes every problem in err on its own line: each field problem with its
// path, and any other error joined with them.
func printProblems(w io.Writer, source string, err error) {
	lines := problemLines(err)
	fmt.Fprintf(w, "%s: %d problem(s):\n", source, len(lines))
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

func problemLines(err error) []string {
	switch e := err.(type) {
	case policies.Errors:
		lines := make([]string, len(e))
		for i, fe := range e {
			lines[i] = fe.Error()
		}
		return lines
	case istio.OptionError:
		return []string{optionProblem(e)}
	case interface{ Unwrap() []error }: // errors.Join: a problem each
		var lines []string
		for _, inner := range e.Unwrap() {
			lines = append(lines, problemLines(inner)...)
		}
		return lines
	}
	if inner := errors.Unwrap(err); inner != nil && holdsProblems(inner) {
		return problemLines(inner) // a package prefix ("envoy: ", "istio: options: ") around them
	}
	return []string{err.Error()}
}

// holdsProblems says whether err or an error it wraps lists problems that say where they
// are (field paths, option names).
func holdsProblems(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		switch err.(type) {
		case policies.Errors, istio.OptionError, interface{ Unwrap() []error }:
			return true
		}
	}
	return false
}

func envoyFailurePolicy(f failurePolicyFlag) wasmv3.FailurePolicy { return wasmv3.FailurePolicy(f) }

// releaseFlag reads a release as 1.N or 1.N.P into its minor number N, refusing one
// older than oldest (envoyrelease.ParseMinor).
type releaseFlag struct {
	minor, oldest int
}

func (r *releaseFlag) String() string {
	if r == nil || r.minor == 0 {
		return ""
	}
	return "1." + strconv.Itoa(r.minor)
}

func (r *releaseFlag) Set(s string) error {
	n, err := envoyrelease.ParseMinor(s, r.oldest)
	if err != nil {
		return err
	}
	r.minor = n
	return nil
}
