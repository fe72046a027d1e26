// Command fakes serves hostsim's fake LLM providers (package hostsim/fakeprovider) on
// fixed addresses, without a proxy in front: the upstreams of e2e/compose.yaml's Envoy,
// or of any proxy under test.
//
//	fakes fake-openai=openai@0.0.0.0:8081 fake-anthropic=anthropic@0.0.0.0:8083
//
// Each argument is NAME=KIND@HOST:PORT: the fake's name (its canned replies mention it;
// use the policy's cluster name), the API it speaks (openai or anthropic) and where it
// listens. The fakes misbehave on the x-fake-* request headers (hostsim/cmd/hostsim's
// README, "Making a fake misbehave") and stream at fakeprovider.DefaultPacing. It serves
// until SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
)

// fakeSpec is one NAME=KIND@HOST:PORT argument.
type fakeSpec struct {
	name string
	kind fakeprovider.Kind
	addr string
}

// parseSpec reads NAME=KIND@HOST:PORT.
func parseSpec(s string) (fakeSpec, error) {
	name, rest, ok := strings.Cut(s, "=")
	kind, addr, ok2 := strings.Cut(rest, "@")
	if !ok || !ok2 || name == "" || addr == "" {
		return fakeSpec{}, fmt.Errorf("fakes: %q: want NAME=KIND@HOST:PORT, e.g. fake-openai=openai@0.0.0.0:8081", s)
	}
	switch k := fakeprovider.Kind(kind); k {
	case fakeprovider.OpenAI, fakeprovider.Anthropic:
		return fakeSpec{name: name, kind: k, addr: addr}, nil
	}
	return fakeSpec{}, fmt.Errorf("fakes: %q: kind %q, want %s or %s", s, kind, fakeprovider.OpenAI, fakeprovider.Anthropic)
}

// run starts a fake per argument, prints where each listens, and serves until ctx is done.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("fakes: no fake given (usage: fakes NAME=KIND@HOST:PORT [NAME=KIND@HOST:PORT ...])")
	}
	var servers []*fakeprovider.Server
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	for _, a := range args {
		spec, err := parseSpec(a)
		if err != nil {
			return err
		}
		p, err := fakeprovider.New(spec.kind, spec.name)
		if err != nil {
			return fmt.Errorf("fakes: %w", err)
		}
		s, err := fakeprovider.Start(p, spec.addr)
		if err != nil {
			return fmt.Errorf("fakes: start %s: %w", spec.name, err)
		}
		servers = append(servers, s)
		fmt.Fprintf(stdout, "fakes: %s (%s) on %s\n", spec.name, spec.kind, s.URL)
	}
	<-ctx.Done()
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
