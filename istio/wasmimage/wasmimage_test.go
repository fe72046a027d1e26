package wasmimage

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// builtModule reads the filter as make build leaves it.
func builtModule(t *testing.T) []byte {
	t.Helper()
	module, err := os.ReadFile(filepath.Join("..", "..", "build", "spillway.wasm"))
	if errors.Is(err, os.ErrNotExist) {
		t.Fatal("build/spillway.wasm is missing: run make build")
	}
	if err != nil {
		t.Fatal(err)
	}
	return module
}

// checkIstioReadable asserts what istio-agent's fetcher requires of an oci-variant image
// (pkg/wasm/imagefetcher.go: an OCI manifest, exactly two layers, the content layer's
// bytes the raw module) and that the content layer's digest is the module's sha256.
func checkIstioReadable(t *testing.T, img v1.Image, module []byte) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %q, want %q (a Docker manifest would be read as the compat variant)", m.MediaType, types.OCIManifestSchema1)
	}
	if m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("config media type %q, want %q", m.Config.MediaType, types.OCIConfigJSON)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want 2 (istio-agent: number of layers must be 2)", len(layers))
	}
	var content v1.Layer
	var seen []types.MediaType
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, mt)
		if mt == ContentMediaType {
			content = l
		}
	}
	if content == nil || seen[0] != RuntimeConfigMediaType {
		t.Fatalf("layer media types %v, want [%s %s]", seen, RuntimeConfigMediaType, ContentMediaType)
	}
	rc, err := content.Compressed() // istio-agent reads the blob as is
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, module) {
		t.Fatalf("content layer holds %d bytes that are not the module (%d bytes)", len(got), len(module))
	}
	sum := sha256.Sum256(module)
	d, err := content.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d.Algorithm != "sha256" || d.Hex != hex.EncodeToString(sum[:]) {
		t.Errorf("content layer digest %s, want the module's sha256:%x", d, sum)
	}
}

func TestBuiltModuleImage(t *testing.T) {
	module := builtModule(t)
	img, err := Build(module, "spillway.wasm")
	if err != nil {
		t.Fatal(err)
	}
	checkIstioReadable(t, img, module)

	// Written as an OCI layout and read back, it is the same image.
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != want {
		t.Fatalf("layout index %v, want one manifest %s", im.Manifests, want)
	}
	back, err := lp.Image(want)
	if err != nil {
		t.Fatal(err)
	}
	checkIstioReadable(t, back, module)
}

// TestPushAndFetch pushes to an in-process registry on loopback and fetches the image the
// way istio-agent does (remote.Get, then Image, then its digest and layers).
func TestPushAndFetch(t *testing.T) {
	module := append(bytes.Clone(wasmMagic), []byte("a small module body")...)
	img, err := Build(module, "spillway.wasm")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref, err := name.ParseReference(strings.TrimPrefix(srv.URL, "http://")+"/spillway:test", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(ref)
	if err != nil {
		t.Fatal(err)
	}
	fetched, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	pushed, _ := img.Digest()
	got, _ := fetched.Digest()
	if got != pushed {
		t.Errorf("fetched manifest digest %s, pushed %s: the sha256 a resource pins would not match", got, pushed)
	}
	checkIstioReadable(t, fetched, module)
}

func TestBuildIsReproducible(t *testing.T) {
	module := append(bytes.Clone(wasmMagic), 1, 2, 3)
	a, err := Build(module, "spillway.wasm")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(module, "spillway.wasm")
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds of one module have digests %s and %s: the pinned digest would change on every build", da, db)
	}
	c, err := Build(append(bytes.Clone(module), 4), "spillway.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if dc, _ := c.Digest(); dc == da {
		t.Error("another module got the same manifest digest")
	}
}

func TestBuildRefusesNonWasm(t *testing.T) {
	for _, tc := range []struct {
		name   string // what the bytes are
		module []byte
	}{
		{"empty", nil},
		{"text", []byte("not a module")},
		{"wasm magic without version", []byte("\x00asm")},
	} {
		if _, err := Build(tc.module, "spillway.wasm"); err == nil || !strings.Contains(err.Error(), "not a Wasm binary module") {
			t.Errorf("%s: err %v, want a not-a-Wasm-module error", tc.name, err)
		}
	}
}
