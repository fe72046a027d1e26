package serve

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
)

// parseFlags parses args with serve's flags into fresh default options.
func parseFlags(args ...string) (Options, error) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.RegisterFlags(fs)
	o.RegisterListenFlag(fs)
	err := fs.Parse(args)
	return o, err
}

func TestFlagDefaults(t *testing.T) {
	o, err := parseFlags()
	if err != nil {
		t.Fatal(err)
	}
	if o.WasmPath != "build/spillway.wasm" || o.PolicyPath != "" || o.Listen != "127.0.0.1:10000" || o.Workers != 2 ||
		len(o.Clusters) != 0 || len(o.Env) != 0 || o.WASI != hostsim.WASIEnvoy133 || o.FailurePolicy != hostsim.FailReload ||
		o.Timeout != 10*time.Minute || o.ConnectTimeout != 5*time.Second || o.RouteTimeout != 0 || o.IdleTimeout != 0 ||
		o.BufferLimit != FromPolicy || !o.AllowOnHeadersStopIteration || o.Admin != "" || o.RouteBufferLimitAtRouter ||
		o.RequestBufferLimit != FromPolicy || o.StreamIdleTimeout != FromPolicy {
		t.Errorf("defaults %+v", o)
	}
}

// -buffer-limit, -request-buffer-limit and -stream-idle-timeout take a value, or "policy"
// for the generated bootstrap's derivation (the default).
func TestPolicyDerivedFlags(t *testing.T) {
	tests := []struct {
		args        []string      // command line
		wantConn    int           // BufferLimit
		wantRequest int           // RequestBufferLimit
		wantIdle    time.Duration // StreamIdleTimeout
	}{
		{nil, FromPolicy, FromPolicy, FromPolicy},
		{[]string{"-request-buffer-limit", "4194304", "-stream-idle-timeout", "90s"}, FromPolicy, 4 << 20, 90 * time.Second},
		{[]string{"-stream-idle-timeout", "0"}, FromPolicy, FromPolicy, 0},
		{[]string{"-request-buffer-limit", "1024", "-request-buffer-limit", "policy", "-stream-idle-timeout", "policy"},
			FromPolicy, FromPolicy, FromPolicy},
		{[]string{"-buffer-limit", "1048576"}, 1 << 20, FromPolicy, FromPolicy},
		{[]string{"-buffer-limit", "1048576", "-buffer-limit", "policy"}, FromPolicy, FromPolicy, FromPolicy},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			o, err := parseFlags(tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if o.BufferLimit != tt.wantConn || o.RequestBufferLimit != tt.wantRequest || o.StreamIdleTimeout != tt.wantIdle {
				t.Errorf("connection buffer %d, request buffer %d, stream idle %v", o.BufferLimit, o.RequestBufferLimit, o.StreamIdleTimeout)
			}
		})
	}
	if l := bufferLimitFlag(FromPolicy); l.String() != "policy" {
		t.Errorf("FromPolicy prints as %q", l.String())
	}
	if d := policyTimeoutFlag(FromPolicy); d.String() != "policy" {
		t.Errorf("FromPolicy prints as %q", d.String())
	}
}

func TestGoodFlagValues(t *testing.T) {
	o, err := parseFlags("-wasm", "x.wasm", "-policy", "p.yaml", "-listen", ":8080",
		"-cluster", "openai=https://api.openai.com", "-cluster", "local=http://127.0.0.1:11434/",
		"-workers", "4", "-env", "OPENAI_KEY_A=sk-1=2", "-env", "EMPTY=",
		"-wasi", "wazero", "-failure-policy", "fail-reload", "-timeout", "30s",
		"-cluster", "gone=", "-allow-on-headers-stop-iteration=false", "-admin", "127.0.0.1:9901",
		"-connect-timeout", "2s", "-route-timeout", "0", "-idle-timeout", "45s", "-buffer-limit", "65536",
		"-route-buffer-limit-at-router", "-envoy-version", "1.39.2")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Clusters) != 3 || o.Clusters[2] != (Cluster{Name: "gone"}) || o.AllowOnHeadersStopIteration ||
		o.Admin != "127.0.0.1:9901" || o.ConnectTimeout != 2*time.Second || o.RouteTimeout != 0 ||
		o.IdleTimeout != 45*time.Second || o.BufferLimit != 65536 || !o.RouteBufferLimitAtRouter || o.EnvoyMinor != 39 {
		t.Errorf("options %+v", o)
	}
	o.Clusters = o.Clusters[:2]
	want := []Cluster{{"openai", "https://api.openai.com"}, {"local", "http://127.0.0.1:11434"}}
	if len(o.Clusters) != 2 || o.Clusters[0] != want[0] || o.Clusters[1] != want[1] {
		t.Errorf("clusters %v", o.Clusters)
	}
	if len(o.Env) != 2 || o.Env[0] != (EnvVar{"OPENAI_KEY_A", "sk-1=2"}) || o.Env[1] != (EnvVar{"EMPTY", ""}) {
		t.Errorf("env %v", o.Env)
	}
	if o.WasmPath != "x.wasm" || o.PolicyPath != "p.yaml" || o.Listen != ":8080" || o.Workers != 4 ||
		o.WASI != hostsim.WASIWazero || o.FailurePolicy != hostsim.FailReload || o.Timeout != 30*time.Second {
		t.Errorf("options %+v", o)
	}
}

func TestBadFlagValues(t *testing.T) {
	tests := []struct {
		args []string // command line
		want string   // substring of the error
	}{
		{[]string{"-cluster", "openai"}, "want name=http://host:port"},
		{[]string{"-cluster", "=http://a:1"}, `cluster name ""`},
		{[]string{"-cluster", "a b=http://a:1"}, `cluster name "a b"`},
		{[]string{"-cluster", "a=ftp://h"}, "must start with http:// or https://"},
		{[]string{"-cluster", "a=http://"}, "has no host"},
		{[]string{"-cluster", "a=http://u:p@h:1"}, "must not carry credentials"},
		{[]string{"-cluster", "a=http://h:1/v1"}, "scheme://host:port only"},
		{[]string{"-cluster", "a=http://h:1?x=1"}, "scheme://host:port only"},
		{[]string{"-cluster", "a=http://h:99999"}, `bad port "99999"`},
		{[]string{"-cluster", "a=http://h:1", "-cluster", "a=http://h:2"}, "cluster a given twice"},
		{[]string{"-env", "NOVALUE"}, "want KEY=VALUE"},
		{[]string{"-env", "1X=a"}, `bad variable name "1X"`},
		{[]string{"-env", "A=1", "-env", "A=2"}, "variable A given twice"},
		{[]string{"-workers", "0"}, "from 1 to 64"},
		{[]string{"-workers", "65"}, "from 1 to 64"},
		{[]string{"-workers", "two"}, "from 1 to 64"},
		{[]string{"-wasi", "envoy134"}, "want envoy133, envoy132, head or wazero"},
		{[]string{"-failure-policy", "closed"}, "want fail-closed, fail-open or fail-reload"},
		{[]string{"-timeout", "0s"}, "positive duration"},
		{[]string{"-timeout", "soon"}, "positive duration"},
		{[]string{"-listen", "10000"}, "want host:port"},
		{[]string{"-listen", "example.com:80"}, "not an IP address"},
		{[]string{"-listen", "127.0.0.1:70000"}, `bad port "70000"`},
		{[]string{"-admin", "9901"}, "want host:port"},
		{[]string{"-connect-timeout", "0"}, "positive duration"},
		{[]string{"-route-timeout", "-1s"}, "0 (none) or a positive duration"},
		{[]string{"-idle-timeout", "later"}, "0 (none) or a positive duration"},
		{[]string{"-buffer-limit", "100"}, "want policy or a number of bytes from 1024 to"},
		{[]string{"-buffer-limit", "1g"}, "from 1024 to"},
		{[]string{"-buffer-limit", "536870913"}, "from 1024 to 536870912"},
		{[]string{"-request-buffer-limit", "100"}, "want policy or a number of bytes from 1024 to"},
		{[]string{"-request-buffer-limit", "536870913"}, "from 1024 to 536870912"},
		{[]string{"-request-buffer-limit", "derive"}, "want policy or a number"},
		{[]string{"-stream-idle-timeout", "-1s"}, "want policy, 0 (none) or a positive duration"},
		{[]string{"-stream-idle-timeout", "never"}, "want policy, 0 (none)"},
		{[]string{"-envoy-version", "1.35"}, "is not supported (1.36 or newer)"},
		{[]string{"-envoy-version", "39"}, "want 1.N or 1.N.P"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parseFlags(tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			// The flag package names the flag and the value.
			if !strings.Contains(err.Error(), "invalid value") || !strings.Contains(err.Error(), tt.args[len(tt.args)-2]) {
				t.Errorf("err %q does not name the flag", err)
			}
		})
	}
}

func TestEnvValuesAreNeverEchoed(t *testing.T) {
	f := envFlag{{"OPENAI_KEY_A", "sk-secret"}}
	if s := f.String(); strings.Contains(s, "sk-secret") || !strings.Contains(s, "OPENAI_KEY_A") {
		t.Errorf("String() = %q", s)
	}
}

func TestModeNamesRoundTrip(t *testing.T) {
	for name, m := range wasiNames {
		if got, err := ParseWASI(name); err != nil || got != m || WASIName(m) != name {
			t.Errorf("wasi %s: %v %v %s", name, got, err, WASIName(m))
		}
	}
	for name, p := range failureNames {
		if got, err := ParseFailurePolicy(name); err != nil || got != p || FailurePolicyName(p) != name {
			t.Errorf("failure policy %s: %v %v %s", name, got, err, FailurePolicyName(p))
		}
	}
}
