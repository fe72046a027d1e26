// Command hostsim runs a proxy-wasm module (Spillway's filter by default) in wazero the way
// Envoy ≥ 1.33 hosts it: `hostsim serve` is a local HTTP proxy through the filter, `hostsim
// run` sends one request through it and prints the answer.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/spillwayproxy/spillway/hostsim/serve"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed
	exitUsage = 2 // bad command line
)

const usage = `hostsim runs a proxy-wasm module (Spillway's filter by default) in wazero the way Envoy does.

Usage:
  hostsim serve [flags]        a local HTTP proxy on -listen that runs every request through the filter
  hostsim run [flags] [PATH]   run one request through the filter and print the answer
  hostsim help [serve|run]     show this help, or a command's flags

With no flags, serve runs build/spillway.wasm (make build) with the embedded demo policy and
built-in fake OpenAI and Anthropic providers, on http://127.0.0.1:10000.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the command with its inputs and outputs passed in, for tests.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "serve":
		return cmdServe(ctx, args[1:], stdout, stderr)
	case "run":
		return cmdRun(ctx, args[1:], stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return cmdHelp(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "hostsim: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

func cmdHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	var fs *flag.FlagSet
	switch args[0] {
	case "serve":
		fs, _ = serveFlags(&serve.Options{})
	case "run":
		fs, _ = runFlags(&serve.Options{}, &request{})
	default:
		fmt.Fprintf(stderr, "hostsim help: unknown command %q\n", args[0])
		return exitUsage
	}
	fs.SetOutput(stdout)
	fs.Usage()
	return exitOK
}

// parse parses args with fs; ok false means exit with code.
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false // the flag package printed the problem and the usage
	}
	return 0, true
}

func serveFlags(o *serve.Options) (*flag.FlagSet, *serve.Options) {
	*o = serve.DefaultOptions()
	fs := flag.NewFlagSet("hostsim serve", flag.ContinueOnError)
	o.RegisterFlags(fs)
	o.RegisterListenFlag(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: hostsim serve [flags]\n\n"+
			"A local HTTP/1.1 and h2c proxy that streams every request through the proxy-wasm module in\n"+
			"worker VMs, chunk by chunk as Envoy does, to the cluster the filter names in filter state,\n"+
			"as the route spillway render envoy writes reads it: a request without one (not routed by\n"+
			"Spillway, or passed by a failed VM under fail-open) goes to the policy's first provider's\n"+
			"cluster, whatever %s header a client sent (removed before the request goes\n"+
			"upstream). The answer streams back the same way.\n"+
			"Fake providers misbehave on x-fake-* request headers (see hostsim/cmd/hostsim/README.md).\n"+
			"\nFlags:\n", serve.HeaderCluster)
		fs.PrintDefaults()
	}
	return fs, o
}

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, o := serveFlags(&serve.Options{})
	fs.SetOutput(stderr)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hostsim serve: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if err := serve.Run(ctx, *o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "hostsim: %v\n", err)
		return exitError
	}
	return exitOK
}

// request is the one request `hostsim run` sends.
type request struct {
	method  string
	headers headerList
	data    string
	host    string
}

// defaultRunBody is what `hostsim run` sends without -d.
const defaultRunBody = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}]}`

// headerList collects -H "Name: value" flags.
type headerList [][2]string

func (h *headerList) String() string { return "" }

func (h *headerList) Set(s string) error {
	k, v, ok := strings.Cut(s, ":")
	k = strings.TrimSpace(k)
	if !ok || k == "" || strings.ContainsAny(k, " \t\r\n") {
		return errors.New(`want "Name: value"`)
	}
	*h = append(*h, [2]string{k, strings.TrimSpace(v)})
	return nil
}

func runFlags(o *serve.Options, r *request) (*flag.FlagSet, *request) {
	*o = serve.DefaultOptions()
	o.Listen = ""
	fs := flag.NewFlagSet("hostsim run", flag.ContinueOnError)
	o.RegisterFlags(fs)
	fs.StringVar(&r.method, "X", "POST", "request method")
	fs.Var(&r.headers, "H", "request header `\"Name: value\"` (repeatable)")
	fs.StringVar(&r.data, "d", defaultRunBody, "request body; @FILE reads a file, @- standard input")
	fs.StringVar(&r.host, "host", "localhost", "request :authority")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: hostsim run [flags] [PATH]\n\n"+
			"Runs one request (default: POST /v1/chat/completions with a gpt-4o chat body) through the\n"+
			"filter and its upstream, and prints the status, headers and body.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs, r
}

func cmdRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o serve.Options
	fs, req := runFlags(&o, &request{})
	fs.SetOutput(stderr)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	path := "/v1/chat/completions"
	switch fs.NArg() {
	case 0:
	case 1:
		path = fs.Arg(0)
	default:
		fmt.Fprintf(stderr, "hostsim run: want at most one PATH, got %q\n", fs.Args())
		return exitUsage
	}
	if !strings.HasPrefix(path, "/") {
		fmt.Fprintf(stderr, "hostsim run: PATH %q must start with /\n", path)
		return exitUsage
	}
	body, err := readBody(req.data, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "hostsim run: -d: %v\n", err)
		return exitUsage
	}
	hreq, err := http.NewRequestWithContext(ctx, req.method, "http://"+req.host+path, nil)
	if err != nil {
		fmt.Fprintf(stderr, "hostsim run: %v\n", err)
		return exitUsage
	}
	hasType := false
	for _, kv := range req.headers {
		hreq.Header.Add(kv[0], kv[1])
		hasType = hasType || strings.EqualFold(kv[0], "content-type")
	}
	if len(body) > 0 && !hasType {
		hreq.Header.Set("Content-Type", "application/json")
	}

	inst, err := serve.Start(o, stderr, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "hostsim: %v\n", err)
		return exitError
	}
	res := inst.Server.Do(hreq, body)
	_ = inst.Shutdown(context.Background())
	if res.Status == 0 {
		fmt.Fprintf(stderr, "hostsim run: no answer (stream reset: %q)\n", res.Reset)
		return exitError
	}
	fmt.Fprintf(stdout, "HTTP/1.1 %d %s\n", res.Status, http.StatusText(res.Status))
	// The body's own length is printed last: the answer's content-length, when it has one,
	// is not printed twice.
	keys := make([]string, 0, len(res.Header))
	for k := range res.Header {
		if !strings.EqualFold(k, "content-length") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range res.Header[k] {
			fmt.Fprintf(stdout, "%s: %s\n", strings.ToLower(k), v)
		}
	}
	fmt.Fprintf(stdout, "content-length: %d\n\n%s\n", len(res.Body), res.Body)
	return exitOK
}

// readBody resolves -d: inline text, @FILE, or @- for standard input.
func readBody(data string, stdin io.Reader) ([]byte, error) {
	name, isFile := strings.CutPrefix(data, "@")
	if !isFile {
		return []byte(data), nil
	}
	if name == "-" {
		return io.ReadAll(io.LimitReader(stdin, serve.MaxRequestBytes))
	}
	return os.ReadFile(name)
}
