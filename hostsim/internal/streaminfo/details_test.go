package streaminfo

import "testing"

// ReplaceAllEmptySpace replaces what StringUtil::replaceAllEmptySpace replaces, and nothing else.
func TestEnvoyDetails(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "",
		"via_upstream":             "via_upstream",
		"all targets cooling down": "all_targets_cooling_down",
		"a\tb\fc\vd\ne\rf":         "a_b_c_d_e_f",
		"额度 不足":                    "额度_不足",
		"{x|y:z}":                  "{x|y:z}",
	} {
		if got := ReplaceAllEmptySpace(in); got != want {
			t.Errorf("ReplaceAllEmptySpace(%q) = %q, want %q", in, got, want)
		}
	}
}
