// Command spillway checks Spillway policies and generates what deploys them:
//
//	spillway lint [-env] [-strict] POLICY...     check policies
//	spillway render envoy [flags]                write a standalone Envoy bootstrap
//	spillway render istio -namespace NS [flags]  write the Istio manifests
//	spillway xds -policy FILE [flags]            serve the filter to Envoy over ECDS
//
// `spillway help` and `spillway CMD -h` describe each command's flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand. Adding one is one entry in commands (or in renderTargets for
// `render X`) and its run function.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands are the top-level subcommands, in the order help lists them.
var commands = []command{
	{"lint", "check a policy: every problem with its field path, warnings, routes never served", runLint},
	{"render", "write generated configuration (render envoy, render istio)", runRender},
	{"xds", "serve the filter's configuration to Envoy over ECDS and push policy changes", runXDS},
}

// renderTargets are what `render` can write.
var renderTargets = []command{
	{"envoy", "a standalone Envoy bootstrap (YAML) that runs Spillway", renderEnvoy},
	{"istio", "the Istio resources (multi-document YAML for kubectl apply) that run Spillway in a mesh", renderIstio},
}

// Exit statuses.
const (
	exitOK      = 0
	exitProblem = 1 // the policy or the configuration has problems
	exitUsage   = 2 // bad command line
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return dispatch(ctx, "spillway", commands, args, stdout, stderr)
}

func runRender(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return dispatch(ctx, "spillway render", renderTargets, args, stdout, stderr)
}

// dispatch runs the subcommand args[0] names.
func dispatch(ctx context.Context, prog string, cmds []command, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		w, code := stdout, exitOK
		if len(args) == 0 {
			w, code = stderr, exitUsage
		}
		fmt.Fprintf(w, "usage: %s COMMAND [flags]\n\ncommands:\n", prog)
		for _, c := range cmds {
			fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
		}
		fmt.Fprintf(w, "\n%s COMMAND -h describes a command's flags.\n", prog)
		return code
	}
	for _, c := range cmds {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "%s: unknown command %q (run %s help)\n", prog, args[0], prog)
	return exitUsage
}
