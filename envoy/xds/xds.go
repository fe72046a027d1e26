// Package xds is Spillway's control plane: it serves the Wasm filter's configuration to
// Envoy over ECDS (extension config discovery) with go-control-plane's server and snapshot
// cache, and pushes a new policy to every connected Envoy when the policy file changes, so
// operators retune without restarting Envoy. A policy that is invalid, or that the running
// bootstraps could not serve (a new cluster, another cluster header, a larger body limit),
// is never pushed: the last good one stays and every problem is logged with its field path.
package xds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/spillwayproxy/spillway/envoy"
)

// nodeGroup is the one snapshot every Envoy gets: they all run the same policy.
const nodeGroup = "spillway"

// allNodes maps every Envoy node to nodeGroup.
type allNodes struct{}

func (allNodes) ID(*corev3.Node) string { return nodeGroup }

// Config configures a Server.
type Config struct {
	// PolicyFile is the policy (YAML or JSON) to serve and watch.
	PolicyFile string
	// Options are the deployment options the bootstraps were rendered with (module, stats
	// tags, failure policy; the same as `spillway render envoy -xds` was given).
	Options envoy.Options
	// Logger receives what the server does; nil logs to standard error.
	Logger *slog.Logger
}

// Server serves the filter's configuration and follows the policy file.
type Server struct {
	cfg   Config
	log   *slog.Logger
	cache cachev3.SnapshotCache
	xds   serverv3.Server

	mu      sync.Mutex
	base    *envoy.Policy // the policy the bootstraps were rendered from: the first one
	sum     [sha256.Size]byte
	serial  int
	version string
}

// New reads the policy file and prepares its snapshot. A policy that is invalid at start
// is an error: there is nothing good to serve yet.
func New(ctx context.Context, cfg Config) (*Server, error) {
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	s.cache = cachev3.NewSnapshotCache(false, allNodes{}, goControlPlaneLogger{s.log})
	s.xds = serverv3.NewServer(ctx, s.cache, serverv3.CallbackFuncs{StreamRequestFunc: s.onRequest})
	data, err := os.ReadFile(cfg.PolicyFile)
	if err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	if err := s.apply(ctx, data, true); err != nil {
		return nil, err
	}
	return s, nil
}

// Register adds the ECDS service to a gRPC server.
func (s *Server) Register(g *grpc.Server) {
	extensionv3.RegisterExtensionConfigDiscoveryServiceServer(g, s.xds)
}

// Version is the version of the snapshot being served ("<serial>-<sha256 prefix>").
func (s *Server) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Reload reads the policy file again and, if its contents changed and the new policy is
// good, pushes it to every connected Envoy. It reports whether it pushed; a rejected
// policy is an error (its problems are also logged, one line per field) and the last good
// policy keeps being served.
func (s *Server) Reload(ctx context.Context) (bool, error) {
	data, err := os.ReadFile(s.cfg.PolicyFile)
	if err != nil {
		s.log.Error("cannot read the policy file; serving the last good policy", "file", s.cfg.PolicyFile, "error", err, "version", s.Version())
		return false, fmt.Errorf("xds: %w", err)
	}
	s.mu.Lock()
	same := sha256.Sum256(data) == s.sum
	s.mu.Unlock()
	if same {
		return false, nil
	}
	if err := s.apply(ctx, data, false); err != nil {
		return false, err
	}
	return true, nil
}

// Watch polls the policy file every interval until ctx ends. Reading the contents (not
// only the modification time) catches every edit, whatever the file system's time
// resolution, and ignores a touch.
func (s *Server) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = s.Reload(ctx) // a rejected policy is logged by Reload
		}
	}
}

// apply validates a policy document and, if good, makes it the served snapshot.
func (s *Server) apply(ctx context.Context, data []byte, first bool) error {
	sum := sha256.Sum256(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	reject := func(err error) error {
		s.sum = sum // report a bad file once, not on every poll
		if fe, ok := envoy.AsFieldErrors(err); ok {
			for _, e := range fe {
				s.log.Error("policy rejected", "file", s.cfg.PolicyFile, "field", e.Path, "problem", e.Message)
			}
		} else {
			s.log.Error("policy rejected", "file", s.cfg.PolicyFile, "error", err)
		}
		if !first {
			s.log.Warn("still serving the last good policy", "version", s.version)
		}
		return fmt.Errorf("xds: %s: %w", s.cfg.PolicyFile, err)
	}
	p, err := envoy.LoadPolicy(data, envoy.LoadOptions{})
	if err != nil {
		return reject(err)
	}
	if !first {
		warnings, err := envoy.Fits(s.base, p)
		if err != nil {
			return reject(err)
		}
		for _, w := range warnings {
			s.log.Warn(w, "file", s.cfg.PolicyFile)
		}
	}
	ext, err := envoy.ExtensionConfig(p, s.cfg.Options)
	if err != nil {
		return reject(err)
	}
	version := fmt.Sprintf("%d-%s", s.serial+1, hex.EncodeToString(sum[:6]))
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.ExtensionConfigType: {ext}})
	if err != nil {
		return reject(err)
	}
	if err := snap.Consistent(); err != nil {
		return reject(err)
	}
	if err := s.cache.SetSnapshot(ctx, nodeGroup, snap); err != nil {
		return reject(err)
	}
	for _, w := range p.Parsed.Warnings {
		s.log.Warn("policy warning", "field", w.Path, "problem", w.Message)
	}
	if first {
		s.base = p
	}
	s.serial++
	s.sum, s.version = sum, version
	s.log.Info("serving policy", "file", s.cfg.PolicyFile, "version", version,
		"providers", len(p.Resolved.Providers), "routes", len(p.Resolved.Routes))
	return nil
}

// onRequest logs what each Envoy says about the versions it got: a NACK means the filter
// refused the policy there (its log names the field; an unset ${NAME} is the usual cause).
func (s *Server) onRequest(_ int64, req *discoveryv3.DiscoveryRequest) error {
	node := req.GetNode().GetId()
	switch {
	case req.GetErrorDetail() != nil:
		s.log.Error("Envoy rejected the configuration", "node", node, "version", req.GetVersionInfo(),
			"nonce", req.GetResponseNonce(), "error", req.GetErrorDetail().GetMessage())
	case req.GetResponseNonce() != "":
		s.log.Info("Envoy applied the configuration", "node", node, "version", req.GetVersionInfo())
	default:
		s.log.Info("Envoy subscribed", "node", node, "resources", req.GetResourceNames())
	}
	return nil
}

// goControlPlaneLogger routes go-control-plane's log to slog (its debug lines stay debug).
type goControlPlaneLogger struct{ log *slog.Logger }

func (l goControlPlaneLogger) Debugf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...))
}
func (l goControlPlaneLogger) Infof(format string, args ...any) {
	l.log.Info(fmt.Sprintf(format, args...))
}
func (l goControlPlaneLogger) Warnf(format string, args ...any) {
	l.log.Warn(fmt.Sprintf(format, args...))
}
func (l goControlPlaneLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...))
}
