// Package foreign is Envoy's built-in foreign functions (proxy_call_foreign_function) as
// hostsim models them, from source/extensions/common/wasm/foreign.cc: compress and
// uncompress (zlib), set_envoy_filter_state's arguments and the filter-state object
// factories it looks up, and the names of those not modelled. It knows no VM: the host
// runs clear_route_cache and stores the filter state.
package foreign

import (
	"bytes"
	"compress/zlib"
	"io"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

// The names Envoy registers (RegisterForeignFunction in foreign.cc) that hostsim runs.
const (
	Compress            = "compress"
	Uncompress          = "uncompress"
	ClearRouteCache     = "clear_route_cache"
	SetEnvoyFilterState = "set_envoy_filter_state"
	DeclareProperty     = "declare_property"
	ExprCreate          = "expr_create"
	ExprEvaluate        = "expr_evaluate"
	ExprDelete          = "expr_delete"
	VerifySignature     = "verify_signature"
	Sign                = "sign"
)

// maxUncompressedBytes bounds uncompress's output (Unzlib).
const maxUncompressedBytes = 64 << 20

// NotModelled are the functions Envoy registers that hostsim does not run: they answer
// NotFound, as for a name nothing registered (cpp-host call_foreign_function), unless a
// test registers its own (WithForeignFunction). declare_property changes how a later
// proxy_set_property stores its value (a typed CelState prototype); expr_* are CEL, which
// hostsim does not evaluate (and Envoy only builds with WASM_USE_CEL_PARSER);
// verify_signature and sign are BoringSSL's.
var NotModelled = []string{DeclareProperty, ExprCreate, ExprEvaluate, ExprDelete, VerifySignature, Sign}

// Zlib is compress: zlib's compress() of the whole argument (the zlib format, RFC 1950, at
// the default level), or SerializationFailure. The bytes may differ from C zlib's; any
// zlib decoder reads them back.
func Zlib(in []byte) ([]byte, abi.Status) {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	if _, err := w.Write(in); err != nil {
		return nil, abi.StatusSerializationFailure
	}
	if err := w.Close(); err != nil {
		return nil, abi.StatusSerializationFailure
	}
	return b.Bytes(), abi.StatusOK
}

// Unzlib is uncompress: zlib's uncompress() of the whole argument, which must be one
// complete zlib stream (anything else, an empty argument included, is zlib's Z_DATA_ERROR,
// which Envoy answers SerializationFailure). Envoy grows its output buffer until the data
// fits; hostsim stops at 64 MiB (SerializationFailure), a bound a 32-bit guest's heap
// sets anyway.
func Unzlib(in []byte) ([]byte, abi.Status) {
	r, err := zlib.NewReader(bytes.NewReader(in))
	if err != nil {
		return nil, abi.StatusSerializationFailure
	}
	out, err := io.ReadAll(io.LimitReader(r, maxUncompressedBytes+1))
	if err != nil || len(out) > maxUncompressedBytes {
		return nil, abi.StatusSerializationFailure
	}
	if err := r.Close(); err != nil {
		return nil, abi.StatusSerializationFailure
	}
	return out, abi.StatusOK
}

// FilterStateArgs are set_envoy_filter_state's arguments, the SetEnvoyFilterStateArguments
// message (source/extensions/common/wasm/ext/set_envoy_filter_state.proto: path = 1,
// value = 2, span = 3).
type FilterStateArgs struct {
	Path, Value string
	// Span is the LifeSpan (0 FilterChain, 1 DownstreamRequest, 2 DownstreamConnection;
	// toFilterStateLifeSpan maps anything else to FilterChain). hostsim keeps every object
	// with its stream, so the span changes nothing here.
	Span uint64
}

// ParseFilterStateArgs decodes the arguments as protobuf's ParseFromString does: unknown
// fields are skipped, a later occurrence of a field wins, and a malformed message or a
// string field that is not UTF-8 (proto3 checks) fails, which Envoy answers BadArgument.
func ParseFilterStateArgs(b []byte) (FilterStateArgs, bool) {
	var a FilterStateArgs
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return a, false
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return a, false
			}
			if num == 1 {
				a.Path = string(v)
			} else {
				a.Value = string(v)
			}
			b = b[n:]
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return a, false
			}
			a.Span, b = v, b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return a, false
			}
			b = b[n:]
		}
	}
	return a, true
}

// Factory is a filter-state object factory (StreamInfo::FilterState::ObjectFactory): it
// makes the object stored under its key from set_envoy_filter_state's value, or reports
// that the value makes none.
type Factory func(value string) (object []byte, ok bool)

// factories are the ObjectFactory registrations hostsim models, by key (a factory's name
// is the key it stores under: Context::setEnvoyFilterState looks the factory up by the
// path and stores the object under the path). Envoy registers others, which hostsim
// answers NotFound for, as Envoy does for a key no factory has. wasm.spillway_target, the
// filter state Spillway's routes read (their matcher cluster specifier's FilterStateInput),
// has no factory in Envoy: set_envoy_filter_state answers NotFound for it, and the filter
// writes it with proxy_set_property (Context::setProperty: a CelState under "wasm.").
var factories = map[string]Factory{
	// source/common/network/upstream_server_name.cc, UpstreamServerNameObjectFactory:
	// createFromBytes keeps the bytes as the server name.
	"envoy.network.upstream_server_name": func(v string) ([]byte, bool) { return []byte(v), true },
}

// FactoryFor returns the factory registered under key.
func FactoryFor(key string) (Factory, bool) {
	f, ok := factories[key]
	return f, ok
}
