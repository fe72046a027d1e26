package policies

import (
	"reflect"
	"testing"
)

func TestProfileTableHasEveryProfile(t *testing.T) {
	if len(profileDefaults) != len(Profiles) {
		t.Errorf("profile table has %d rows for %d profiles", len(profileDefaults), len(Profiles))
	}
	for _, p := range Profiles {
		if _, ok := ProfileDefaults(p); !ok {
			t.Errorf("no defaults for profile %s", p)
		}
	}
	if _, ok := ProfileDefaults("gold"); ok {
		t.Error("defaults for an unknown profile")
	}
}

func TestProfileDefaultsIsACopy(t *testing.T) {
	d, _ := ProfileDefaults(ProfileOAuth)
	d.Breaker.TripStatuses[0] = 599
	d.Breaker.FailureThreshold = 99
	again, _ := ProfileDefaults(ProfileOAuth)
	if again.Breaker.TripStatuses[0] != 408 || again.Breaker.FailureThreshold != BreakerOAuthFailureThreshold || BreakerTripStatuses[0] != 408 {
		t.Error("changing returned defaults changed the table")
	}
}

// TestResolvedProviderStartsFromItsRow: a provider with no overrides resolves to exactly its
// profile's row of the table (the table is the only source of per-profile defaults).
func TestResolvedProviderStartsFromItsRow(t *testing.T) {
	r := resolveThree(t, "")
	for _, pr := range r.Providers {
		row, _ := ProfileDefaults(pr.Profile)
		got := ProfileSettings{Breaker: pr.Breaker, ProviderCooldown: pr.ProviderCooldown, ConnectionCooldown: pr.ConnectionCooldown}
		if !reflect.DeepEqual(got, row) {
			t.Errorf("%s (%s) = %+v, want its row %+v", pr.ID, pr.Profile, got, row)
		}
	}
}

// TestDefaultsAreAnEmptyPolicyResolved: Defaults has every policy-wide field of a resolved
// policy that sets nothing.
func TestDefaultsAreAnEmptyPolicyResolved(t *testing.T) {
	d := reflect.ValueOf(Defaults()).Elem()
	r := reflect.ValueOf(resolveThree(t, "")).Elem()
	for i := 0; i < d.NumField(); i++ {
		f := d.Type().Field(i)
		if !f.IsExported() || f.Name == "Providers" || f.Name == "Routes" {
			continue
		}
		if !reflect.DeepEqual(d.Field(i).Interface(), r.Field(i).Interface()) {
			t.Errorf("Defaults().%s = %+v, a policy without settings resolves to %+v", f.Name, d.Field(i), r.Field(i))
		}
	}
	if len(Defaults().Providers) != 0 || len(Defaults().Routes) != 0 {
		t.Error("Defaults has providers or routes")
	}
}
