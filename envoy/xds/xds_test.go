package xds_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/envoy/xds"
)

// policy is a valid policy whose queue wait is maxWaitMs: the value the tests retune.
func policy(maxWaitMs string) string {
	return `
providers:
  - id: openai
    cluster: openai
    authority: api.openai.com
    connections:
      - id: a
        credential: {header: authorization, value: "Bearer ${OPENAI_KEY}"}
routes:
  - model: gpt-4o
    targets: [{provider: openai}]
resilience:
  requestQueue: {maxWaitMs: ` + maxWaitMs + `}
`
}

// syncBuffer is a log sink the server's goroutines and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is a control plane on an in-memory gRPC connection.
type harness struct {
	t      *testing.T
	ctx    context.Context
	file   string
	server *xds.Server
	logs   *syncBuffer
	conn   *grpc.ClientConn
}

func start(t *testing.T, initial string) *harness {
	t.Helper()
	// A hang guard only: every step below waits on a message, never on time.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	h := &harness{t: t, ctx: ctx, file: filepath.Join(t.TempDir(), "policy.yaml"), logs: &syncBuffer{}}
	h.write(initial)
	s, err := xds.New(ctx, xds.Config{PolicyFile: h.file, Logger: slog.New(slog.NewTextHandler(h.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h.server = s
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	s.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///spillway-xds",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h.conn = conn
	return h
}

func (h *harness) write(doc string) {
	h.t.Helper()
	if err := os.WriteFile(h.file, []byte(doc), 0o600); err != nil {
		h.t.Fatal(err)
	}
}

// envoyStream is one Envoy's ECDS subscription, as Envoy makes it (state of the world).
type envoyStream struct {
	t      *testing.T
	node   string
	stream extensionv3.ExtensionConfigDiscoveryService_StreamExtensionConfigsClient
}

func (h *harness) subscribe(node string) *envoyStream {
	h.t.Helper()
	st, err := extensionv3.NewExtensionConfigDiscoveryServiceClient(h.conn).StreamExtensionConfigs(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	e := &envoyStream{t: h.t, node: node, stream: st}
	e.send(&discoveryv3.DiscoveryRequest{
		Node:          &corev3.Node{Id: node},
		TypeUrl:       resourcev3.ExtensionConfigType,
		ResourceNames: []string{envoy.ExtensionConfigName},
	})
	return e
}

func (e *envoyStream) send(req *discoveryv3.DiscoveryRequest) {
	e.t.Helper()
	if err := e.stream.Send(req); err != nil {
		e.t.Fatal(err)
	}
}

// recv reads the next push and returns its version and the policy JSON it carries.
func (e *envoyStream) recv() (*discoveryv3.DiscoveryResponse, string) {
	e.t.Helper()
	resp, err := e.stream.Recv()
	if err != nil {
		e.t.Fatalf("%s: %v", e.node, err)
	}
	if resp.GetTypeUrl() != resourcev3.ExtensionConfigType || len(resp.GetResources()) != 1 {
		e.t.Fatalf("%s: response %v, want one TypedExtensionConfig", e.node, resp)
	}
	var ext corev3.TypedExtensionConfig
	if err := resp.GetResources()[0].UnmarshalTo(&ext); err != nil {
		e.t.Fatal(err)
	}
	if ext.GetName() != envoy.ExtensionConfigName {
		e.t.Fatalf("resource %q, want %q", ext.GetName(), envoy.ExtensionConfigName)
	}
	var w wasmfilterv3.Wasm
	if err := ext.GetTypedConfig().UnmarshalTo(&w); err != nil {
		e.t.Fatal(err)
	}
	if !w.GetConfig().GetAllowOnHeadersStopIteration().GetValue() {
		e.t.Error("pushed filter lacks allow_on_headers_stop_iteration")
	}
	var cfg wrapperspb.StringValue
	if err := w.GetConfig().GetConfiguration().UnmarshalTo(&cfg); err != nil {
		e.t.Fatal(err)
	}
	return resp, cfg.GetValue()
}

// ack acknowledges a response, as Envoy does once it applied it.
func (e *envoyStream) ack(resp *discoveryv3.DiscoveryResponse) {
	e.t.Helper()
	e.send(&discoveryv3.DiscoveryRequest{
		Node:          &corev3.Node{Id: e.node},
		TypeUrl:       resourcev3.ExtensionConfigType,
		ResourceNames: []string{envoy.ExtensionConfigName},
		VersionInfo:   resp.GetVersionInfo(),
		ResponseNonce: resp.GetNonce(),
	})
}

func (h *harness) reload(wantPushed bool) error {
	h.t.Helper()
	pushed, err := h.server.Reload(h.ctx)
	if pushed != wantPushed {
		h.t.Fatalf("Reload pushed=%v (err %v), want %v", pushed, err, wantPushed)
	}
	return err
}

func TestECDSPushesEveryGoodPolicyAndNeverABadOne(t *testing.T) {
	h := start(t, policy("5000"))
	envoys := []*envoyStream{h.subscribe("envoy-1"), h.subscribe("envoy-2")}

	// Request → the current policy, ACK.
	first := make([]string, len(envoys))
	for i, e := range envoys {
		resp, cfg := e.recv()
		if !strings.Contains(cfg, `"maxWaitMs": 5000`) || !strings.Contains(cfg, "${OPENAI_KEY}") {
			t.Fatalf("%s got %s", e.node, cfg)
		}
		first[i] = resp.GetVersionInfo()
		e.ack(resp)
	}
	if first[0] != h.server.Version() || first[1] != first[0] {
		t.Fatalf("versions %v, server serves %s", first, h.server.Version())
	}

	// An unchanged file pushes nothing.
	if err := h.reload(false); err != nil {
		t.Fatal(err)
	}

	// Update → pushed to every connected Envoy.
	h.write(policy("7000"))
	if err := h.reload(true); err != nil {
		t.Fatal(err)
	}
	second := h.server.Version()
	for _, e := range envoys {
		resp, cfg := e.recv()
		if resp.GetVersionInfo() != second || !strings.Contains(cfg, `"maxWaitMs": 7000`) {
			t.Fatalf("%s: version %s, want %s with the new policy; got %s", e.node, resp.GetVersionInfo(), second, cfg)
		}
		e.ack(resp)
	}

	// Rejected policies: each logged with its field paths, none pushed, the version kept.
	rejected := []struct {
		name   string
		doc    string
		fields []string // the field paths the log must name
	}{
		{"invalid", strings.Replace(policy("7000"), "provider: openai}", "provider: azure}", 1) + "bogus: 1\n",
			[]string{"field=bogus", "field=routes[0].targets[0].provider"}},
		{"new cluster", strings.Replace(policy("7000"), "cluster: openai", "cluster: openai-eu", 1),
			[]string{"field=providers[0].cluster"}},
		{"other cluster header", policy("7000") + "routing: {clusterHeader: x-other}\n",
			[]string{"field=routing.clusterHeader"}},
	}
	for _, r := range rejected {
		h.write(r.doc)
		if err := h.reload(false); err == nil {
			t.Fatalf("%s: Reload accepted it", r.name)
		}
		for _, f := range r.fields {
			if !strings.Contains(h.logs.String(), f) {
				t.Errorf("%s: the log does not name %s:\n%s", r.name, f, h.logs.String())
			}
		}
		if h.server.Version() != second {
			t.Errorf("%s: serving %s, want the last good %s", r.name, h.server.Version(), second)
		}
		// The same bad file is not reported again on every poll.
		if err := h.reload(false); err != nil {
			t.Errorf("%s: a second poll of the unchanged file: %v", r.name, err)
		}
	}
	if !strings.Contains(h.logs.String(), "still serving the last good policy") {
		t.Error("the log does not say the last good policy stays")
	}

	// The next good policy is what every Envoy receives next: nothing rejected reached it.
	h.write(policy("9000"))
	if err := h.reload(true); err != nil {
		t.Fatal(err)
	}
	for _, e := range envoys {
		resp, cfg := e.recv()
		if resp.GetVersionInfo() != h.server.Version() || !strings.Contains(cfg, `"maxWaitMs": 9000`) {
			t.Fatalf("%s: got version %s (%s), want the good policy %s", e.node, resp.GetVersionInfo(), cfg, h.server.Version())
		}
		if resp.GetVersionInfo() == second {
			t.Fatalf("%s: version did not move", e.node)
		}
	}
}

func TestANackIsLogged(t *testing.T) {
	h := start(t, policy("5000"))
	e := h.subscribe("envoy-1")
	resp, _ := e.recv()
	e.send(&discoveryv3.DiscoveryRequest{
		Node:          &corev3.Node{Id: "envoy-1"},
		TypeUrl:       resourcev3.ExtensionConfigType,
		ResourceNames: []string{envoy.ExtensionConfigName},
		ResponseNonce: resp.GetNonce(),
		ErrorDetail:   &rpcstatus.Status{Message: `Unable to create Wasm HTTP filter spillway`},
	})
	// The server reads a stream's requests in order: once it has seen the end of this one
	// (and closed the stream), it has handled the NACK. (A NACK of the first push carries
	// no accepted version, so go-control-plane answers it with the snapshot again.)
	if err := e.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := e.stream.Recv(); err != nil {
			break
		}
	}
	if !strings.Contains(h.logs.String(), "Envoy rejected the configuration") || !strings.Contains(h.logs.String(), "Unable to create Wasm HTTP filter") {
		t.Errorf("NACK not logged:\n%s", h.logs.String())
	}
}

func TestInvalidPolicyAtStartIsAnError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("providers: []\nroutes: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	_, err := xds.New(context.Background(), xds.Config{PolicyFile: file, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil || !strings.Contains(logs.String(), "field=providers") {
		t.Errorf("err %v, log %s: want a refusal naming providers", err, logs.String())
	}
}
