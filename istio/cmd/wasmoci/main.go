// Command wasmoci packs build/spillway.wasm into an OCI image Istio's Wasm image fetcher
// loads (package istio/wasmimage), without a container engine: it writes an OCI image
// layout directory and, given -push, pushes the image to a registry with the credentials
// of the local Docker config (~/.docker/config.json, DOCKER_CONFIG), as docker would.
//
//	wasmoci -wasm build/spillway.wasm -layout build/oci [-push ghcr.io/OWNER/spillway:TAG]
//
// It prints the image's manifest digest, the value for the sha256 of an EnvoyFilter's or
// WasmPlugin's oci:// module (istio.Options.ImageDigest), and the module's own sha256.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/spillwayproxy/spillway/istio/wasmimage"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("wasmoci", flag.ContinueOnError)
	wasmPath := fs.String("wasm", "build/spillway.wasm", "the module to pack")
	layoutDir := fs.String("layout", "build/oci", "OCI image layout directory to write (replaced)")
	push := fs.String("push", "", "registry reference to push to, e.g. ghcr.io/OWNER/spillway:0.1.0 (optional)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("wasmoci: unexpected arguments %q", fs.Args())
	}
	module, err := os.ReadFile(*wasmPath)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("wasmoci: %s is missing: run make build", *wasmPath)
	}
	if err != nil {
		return fmt.Errorf("wasmoci: %w", err)
	}
	img, err := wasmimage.Build(module, filepath.Base(*wasmPath))
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("wasmoci: %w", err)
	}
	if err := os.RemoveAll(*layoutDir); err != nil {
		return fmt.Errorf("wasmoci: %w", err)
	}
	lp, err := layout.Write(*layoutDir, empty.Index)
	if err != nil {
		return fmt.Errorf("wasmoci: %w", err)
	}
	if err := lp.AppendImage(img); err != nil {
		return fmt.Errorf("wasmoci: %w", err)
	}
	sum := sha256.Sum256(module)
	fmt.Fprintf(stdout, "layout:          %s\n", *layoutDir)
	fmt.Fprintf(stdout, "manifest digest: %s  (the sha256 istio-agent compares: pin it as the image digest)\n", digest)
	fmt.Fprintf(stdout, "module sha256:   %s  (the wasm layer's digest)\n", hex.EncodeToString(sum[:]))
	if *push == "" {
		return nil
	}
	ref, err := name.ParseReference(*push, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("wasmoci: -push %q: %w", *push, err)
	}
	if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("wasmoci: push %s: %w", ref, err)
	}
	fmt.Fprintf(stdout, "pushed:          oci://%s@%s\n", ref.Context().Name(), digest)
	return nil
}
