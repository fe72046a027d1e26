// Package wasmimage packs a proxy-wasm module into an OCI image that Istio's Wasm image
// fetcher loads: the *oci* variant of the Wasm image specification (solo-io/wasm
// spec/spec.md), two layers of custom media types, one of them the raw module.
//
// istio-agent (pkg/wasm/imagefetcher.go, PrepareFetch and extractOCIArtifactImage) wants
// exactly two layers and reads the one of media type ContentMediaType as the raw module,
// uncompressed; that layer's digest is therefore the module's own sha256. The digest
// istio-agent compares with a resource's sha256 field is the image's manifest digest
// (pkg/wasm/cache.go, getOrFetch), which Build's image reports from Digest.
package wasmimage

import (
	"bytes"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The media types of the oci variant's layers.
const (
	// ContentMediaType is the layer holding the module itself.
	ContentMediaType types.MediaType = "application/vnd.module.wasm.content.layer.v1+wasm"
	// RuntimeConfigMediaType is the layer holding the runtime configuration.
	RuntimeConfigMediaType types.MediaType = "application/vnd.module.wasm.config.v1+json"
)

// runtimeConfig is the spec's runtime configuration for an Envoy filter: the ABI the
// module speaks (Spillway's SDK exports proxy-wasm ABI 0.2.0) and its root ids (Spillway
// registers none: any root_id, the default one included, gets its root context).
type runtimeConfig struct {
	Type        string   `json:"type"`
	ABIVersions []string `json:"abiVersions"`
	Config      struct {
		RootIDs []string `json:"root_ids"`
	} `json:"config"`
}

// wasmMagic opens every Wasm binary module ("\0asm", version 1).
var wasmMagic = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// Build returns the image holding module, named name inside the image (the layer's
// org.opencontainers.image.title). It refuses bytes that are not a Wasm binary module,
// which istio-agent would refuse after the download (pkg/wasm/cache.go, isValidWasmBinary).
func Build(module []byte, name string) (v1.Image, error) {
	if !bytes.HasPrefix(module, wasmMagic) {
		return nil, fmt.Errorf("wasmimage: %s is not a Wasm binary module (no \\0asm version 1 header)", name)
	}
	rc := runtimeConfig{Type: "envoy_proxy", ABIVersions: []string{"proxy_abi_version_0_2_0"}}
	rc.Config.RootIDs = []string{}
	cfg, err := json.Marshal(rc)
	if err != nil {
		return nil, fmt.Errorf("wasmimage: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base,
		mutate.Addendum{
			Layer:       static.NewLayer(cfg, RuntimeConfigMediaType),
			Annotations: map[string]string{"org.opencontainers.image.title": "runtime-config.json"},
		},
		mutate.Addendum{
			Layer:       static.NewLayer(module, ContentMediaType),
			Annotations: map[string]string{"org.opencontainers.image.title": name},
		},
	)
	if err != nil {
		return nil, fmt.Errorf("wasmimage: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("wasmimage: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "wasip1", "wasm"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("wasmimage: %w", err)
	}
	return img, nil
}
