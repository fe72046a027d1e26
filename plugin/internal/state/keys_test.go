package state

import (
	"strings"
	"testing"
)

// The registry's invariants: three-byte distinct tags, every record kind stored under a key
// kind of its owner, and every key kind's shape parseable.
func TestKeyRegistry(t *testing.T) {
	tags := map[string]bool{}
	for _, k := range Keys {
		if len(k.Tag) != 3 || tags[k.Tag] {
			t.Errorf("tag %q: want three bytes, unique", k.Tag)
		}
		tags[k.Tag] = true
		if strings.Count(k.Parts, "p")+strings.Count(k.Parts, "r")+strings.Count(k.Parts, "l")+strings.Count(k.Parts, "s") > 1 {
			t.Errorf("%s: more than one free part in %q", k.Tag, k.Parts)
		}
	}
	for _, info := range Kinds {
		found := false
		for _, k := range Keys {
			if k.Kind == info.Kind {
				found = true
				if k.Owner != info.Owner {
					t.Errorf("kind %q is %s's, its key %s is built by %s", info.Kind, info.Owner, k.Tag, k.Owner)
				}
			}
		}
		if !found {
			t.Errorf("record kind %q (%s) has no key kind", info.Kind, info.Record)
		}
	}
}

// The layout, spelled out (the README's key table): a key of every kind parses as that
// kind, and IsLive says what the table says.
func TestKeyLayout(t *testing.T) {
	const u, a, n = "00112233445566ff", "0123456789abcdef", "fedcba9876543210"
	for _, tc := range []struct {
		key  string  // a key as the table spells it
		kind KeyKind // its kind
		live bool    // bypasses the per-VM cache
	}{
		{"spw2:brk:" + u, KeyBreaker, false},
		{"spw2:pcw:" + u, KeyGateWindow, false},
		{"spw2:pcb:" + a, KeyGateBackoff, false},
		{"spw2:ccd:" + a, KeyConnCooldown, false},
		{"spw2:ccp:" + u, KeyRecoveryProbe, false},
		{"spw2:rck:" + a, KeyRecheck, true},
		{"spw2:rct", KeyRecheckTick, true},
		{"spw2:mli:" + a, KeyLockoutIndex, false},
		{"spw2:mlk:" + a + ":exact:llama3:8b", KeyLockout, false},
		{"spw2:mlk:" + a + ":~3", KeyLockout, false},
		{"spw2:adl:" + a, KeyLease, true},
		{"spw2:adt:" + n + ":" + a, KeyTickets, true},
		{"spw2:adg:" + n, KeyGlobalPool, true},
		{"spw2:adp:" + n + ":openai", KeyProviderPool, true},
		{"spw2:srr:" + n + ":gpt-4o", KeyTurn, true},
		{"spw2:sdk:" + n + ":claude-*", KeyDeck, true},
		{"spw2:aff:" + n + ":16383", KeyPin, true},
		{"spw2:vms", KeyDirectory, true},
		{"spw2:gen", KeyGeneration, false},
		{"spw2:grd", KeyGuard, false},
		{"spw2:wak:" + a, KeyWakeQueue, false},
	} {
		k, ok := ParseKey(tc.key)
		if !ok || k.Tag != tc.kind.Tag {
			t.Errorf("ParseKey(%q) = %s, %v; want %s", tc.key, k.Tag, ok, tc.kind.Tag)
		}
		if IsLive(tc.key) != tc.live || tc.kind.Live != tc.live {
			t.Errorf("%q: IsLive %v, registry %v, want %v", tc.key, IsLive(tc.key), tc.kind.Live, tc.live)
		}
	}
	if GenerationKey != "spw2:gen" {
		t.Errorf("generation key %q", GenerationKey)
	}
	for _, bad := range []string{"spw1:br:openai", "spw2:", "spw2:brk", "spw2:brk:openai", "spw2:ccd:" + a + "x",
		"spw2:adt:" + n, "spw2:aff:" + n + ":12a", "spw2:zzz:" + a, "spw2:srr:" + n + ":", "spw2:ccd:0123456789ABCDEF"} {
		if k, ok := ParseKey(bad); ok {
			t.Errorf("ParseKey(%q) accepted it as %s", bad, k.Tag)
		}
	}
}

// Identities: every input tells them apart, the two sources of a namespace never meet, and
// no credential byte reaches a key.
func TestIdentities(t *testing.T) {
	up := UpstreamID("outbound|443||api.openai.com", "api.openai.com")
	ids := []string{
		up,
		UpstreamID("outbound|443||api.openai.com", ""),
		UpstreamID("outbound|443||api.openai.com", "eu.api.openai.com"),
		AccountID(up, "authorization", "Bearer sk-live-123"),
		AccountID(up, "authorization", "Bearer sk-live-124"),
		AccountID(up, "x-api-key", "Bearer sk-live-123"),
		AccountID(UpstreamID("other", ""), "authorization", "Bearer sk-live-123"),
		LocalAccountID(NamespaceID("", "a", ""), "ollama", "box"),
		LocalAccountID(NamespaceID("", "b", ""), "ollama", "box"),
		NamespaceID("team", "", ""),
		NamespaceID("", "team", ""),
		NamespaceID("", "ns.name", "root"),
		NamespaceID("", "ns.nam", "eroot"),
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if len(id) != IDLen || !isLowerHex(id) || seen[id] {
			t.Errorf("identity %q: want %d distinct lowercase hex digits", id, IDLen)
		}
		seen[id] = true
	}
	if AccountID(up, "authorization", "Bearer sk-live-123") != ids[3] {
		t.Error("AccountID is not a function of its inputs")
	}
	if NamespaceID("team", "plugin", "root") != NamespaceID("team", "", "") {
		t.Error("an explicit stateNamespace does not override the plugin's name and root id")
	}
	key := KeyLease.Key(AccountID(up, "authorization", "Bearer sk-live-123"))
	if strings.Contains(key, "sk-live") || strings.Contains(key, "Bearer") {
		t.Errorf("key %q carries the credential", key)
	}
}
