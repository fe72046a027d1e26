package envoycheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Write puts a scenario's two traces under dir in the golden format, <scenario>.envoy.trace
// and <scenario>.hostsim.trace, and their Diff as <scenario>.diff when they differ (an old
// diff is removed when they agree). It reports whether they differ.
func Write(dir string, envoy, host Trace) (differs bool, err error) {
	if envoy.Scenario != host.Scenario {
		return false, fmt.Errorf("envoycheck: traces of two scenarios, %q and %q", envoy.Scenario, host.Scenario)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("envoycheck: %w", err)
	}
	base := filepath.Join(dir, envoy.Scenario)
	if err := os.WriteFile(base+".envoy.trace", envoy.Marshal(), 0o644); err != nil {
		return false, fmt.Errorf("envoycheck: %w", err)
	}
	if err := os.WriteFile(base+".hostsim.trace", host.Marshal(), 0o644); err != nil {
		return false, fmt.Errorf("envoycheck: %w", err)
	}
	d := Diff(envoy, host)
	if d == "" {
		if err := os.Remove(base + ".diff"); err != nil && !os.IsNotExist(err) {
			return false, fmt.Errorf("envoycheck: %w", err)
		}
		return false, nil
	}
	head := fmt.Sprintf("# envoy-check %s: - %s, + hostsim\n", envoy.Scenario, envoy.Source)
	if err := os.WriteFile(base+".diff", []byte(head+d), 0o644); err != nil {
		return false, fmt.Errorf("envoycheck: %w", err)
	}
	return true, nil
}

// Summary is one line per scenario: "same" or "differs (<scenario>.diff)".
func Summary(results map[string]bool) string {
	var b strings.Builder
	for _, s := range Scenarios {
		differs, ok := results[s.Name]
		switch {
		case !ok:
			fmt.Fprintf(&b, "%-12s not run\n", s.Name)
		case differs:
			fmt.Fprintf(&b, "%-12s differs (%s.diff)\n", s.Name, s.Name)
		default:
			fmt.Fprintf(&b, "%-12s same\n", s.Name)
		}
	}
	return b.String()
}
