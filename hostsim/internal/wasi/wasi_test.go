package wasi

import (
	"slices"
	"testing"
)

// The functions linked are exactly the union of the Envoy modes' sets, and each mode's set
// grows on the one before it, as cpp-host's did (#427, then #533).
func TestFunctionsAreTheModesUnion(t *testing.T) {
	var linked []string
	for _, f := range Funcs() {
		linked = append(linked, f.Name)
	}
	slices.Sort(linked)
	if head := CppHostHead.WASIFunctions(); !slices.Equal(linked, head) {
		t.Fatalf("linked %q, want cpp-host head's %q", linked, head)
	}
	for _, tc := range []struct {
		older, newer Mode // two modes, older first
	}{
		{Envoy132, Envoy133},
		{Envoy133, CppHostHead},
	} {
		for _, name := range tc.older.WASIFunctions() {
			if !tc.newer.Provides(name) {
				t.Errorf("%s provides %s but %s does not", tc.older, name, tc.newer)
			}
		}
		if len(tc.newer.WASIFunctions()) <= len(tc.older.WASIFunctions()) {
			t.Errorf("%s adds nothing to %s", tc.newer, tc.older)
		}
	}
	if Envoy133.Provides("fd_filestat_get") || !Wazero.Provides("anything") || Wazero.WASIFunctions() != nil {
		t.Fatal("Provides: Envoy 1.33 has no #533 stubs; wazero provides everything")
	}
}
