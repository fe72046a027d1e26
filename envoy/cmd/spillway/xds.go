package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/envoy/xds"
)

// runXDS serves the filter's configuration over ECDS until interrupted, pushing the policy
// file's changes to every connected Envoy.
func runXDS(ctx context.Context, args []string, _, stderr io.Writer) int {
	fs := newFlagSet("spillway xds", "spillway xds -policy FILE [-listen HOST:PORT] [-poll D] [flags]", stderr)
	policyPath := fs.String("policy", "", "the policy to serve and follow, YAML or JSON (`FILE`; required)")
	listen := fs.String("listen", "127.0.0.1:18000", "the gRPC `HOST:PORT` Envoy connects to (render envoy -xds names it)")
	poll := fs.Duration("poll", 2*time.Second, "how often the policy file is read for changes")
	var mod moduleFlags
	mod.register(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *policyPath == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "spillway xds: -policy FILE is required, and nothing else")
		fs.Usage()
		return exitUsage
	}
	if *poll < 100*time.Millisecond {
		fmt.Fprintln(stderr, "spillway xds: -poll must be at least 100ms")
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	s, err := xds.New(ctx, xds.Config{
		PolicyFile: *policyPath,
		Options:    envoy.Options{Module: mod.module(), FailurePolicy: envoyFailurePolicy(mod.failure)},
		Logger:     log,
	})
	if err != nil {
		return exitProblem // New logged every problem
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("cannot listen", "address", *listen, "error", err)
		return exitProblem
	}
	g := grpc.NewServer()
	s.Register(g)
	go s.Watch(ctx, *poll)
	go func() {
		<-ctx.Done()
		g.GracefulStop()
	}()
	log.Info("serving ECDS", "address", lis.Addr().String(), "resource", envoy.ExtensionConfigName, "poll", poll.String())
	if err := g.Serve(lis); err != nil {
		log.Error("gRPC server stopped", "error", err)
		return exitProblem
	}
	return exitOK
}
