// Package examples embeds Spillway's example policies (YAML): demo.yaml, the policy
// `hostsim serve` runs by default, and the documented multi-provider, agentrouter,
// header-routed and router-failover (router.yaml) setups.
package examples

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
)

//go:embed *.yaml
var files embed.FS

// Demo returns demo.yaml: fake-openai, fake-openrouter and fake-anthropic clusters, two
// connections on one provider, a combo that falls back to an OpenAI-compatible gateway, and
// queue caps. Its credentials default to fake keys.
func Demo() []byte {
	return mustRead("demo.yaml")
}

// MultiProvider returns multi-provider.yaml: several providers with fallbacks across them.
func MultiProvider() []byte {
	return mustRead("multi-provider.yaml")
}

// Agentrouter returns agentrouter.yaml: agentrouter's status restatement and error rules.
func Agentrouter() []byte {
	return mustRead("agentrouter.yaml")
}

// FS returns every example file.
func FS() fs.FS {
	return files
}

// Names lists the example file names, sorted.
func Names() []string {
	entries, err := files.ReadDir(".")
	if err != nil {
		panic("examples: " + err.Error()) // embedded: cannot fail
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// Get returns one example by file name.
func Get(name string) ([]byte, error) {
	data, err := files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("examples: %w", err)
	}
	return data, nil
}

func mustRead(name string) []byte {
	data, err := files.ReadFile(name)
	if err != nil {
		panic("examples: " + err.Error()) // embedded: cannot fail
	}
	return data
}
