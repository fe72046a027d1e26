package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/policies/lint"
)

// runLint checks policy files the way the filter reads them and reports, per file, every
// problem with its field path (the filter would refuse the policy), every warning (values
// clamped, doubtful settings), what can never be served, and notices (lint.Notices).
func runLint(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("spillway lint", "spillway lint [-env] [-strict] POLICY...", stderr)
	useEnv := fs.Bool("env", false, "expand ${NAME} from this environment, as the filter will from its VM's: checks that every credential is set (run it where Envoy runs)")
	strict := fs.Bool("strict", false, "fail on warnings and on routes or providers that are never used, too")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "spillway lint: name at least one policy file")
		fs.Usage()
		return exitUsage
	}
	opts := envoy.LoadOptions{}
	if *useEnv {
		opts.LookupEnv = os.LookupEnv
	}
	code := exitOK
	for _, path := range fs.Args() {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(stdout, "%s: %v\n", path, err)
			code = exitProblem
			continue
		}
		p, err := envoy.LoadPolicy(data, opts)
		if err != nil {
			printProblems(stdout, path, err)
			code = exitProblem
			continue
		}
		warnings, unserved := p.Parsed.Warnings, lint.Unserved(p.Parsed)
		if len(warnings) == 0 && len(unserved) == 0 {
			fmt.Fprintf(stdout, "%s: ok (%d providers, %d routes)\n", path, len(p.Resolved.Providers), len(p.Resolved.Routes))
		} else {
			fmt.Fprintf(stdout, "%s: valid, with %d warning(s) and %d never served or used\n", path, len(warnings), len(unserved))
			for _, w := range warnings {
				fmt.Fprintf(stdout, "  warning: %s\n", w.Error())
			}
			for _, u := range unserved {
				fmt.Fprintf(stdout, "  %s\n", u.Error())
			}
			if *strict {
				code = exitProblem
			}
		}
		// Notices inform and never fail, -strict included.
		for _, n := range lint.Notices(p.Parsed) {
			fmt.Fprintf(stdout, "  notice: %s\n", n.Error())
		}
	}
	return code
}
