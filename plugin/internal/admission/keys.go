package admission

import (
	"strconv"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Shared-data keys, one builder per record kind (record.go has the layouts). A change of
// namespace (a prefix per plugin, or a stateNamespace) is a change here only.

// leaseKey is a connection's lease record. The length prefix keeps ("a:b", "c") and
// ("a", "b:c") apart.
func leaseKey(provider, connection string) string {
	return state.KeyPrefix + "adm:c:" + connPart(provider, connection)
}

// ticketKey is a connection's ticket record.
func ticketKey(provider, connection string) string {
	return state.KeyPrefix + "adm:t:" + connPart(provider, connection)
}

// globalPoolKey is the pool record of the global cap.
func globalPoolKey() string { return state.KeyPrefix + "adm:g" }

// providerPoolKey is the pool record of a provider's cap.
func providerPoolKey(provider string) string { return state.KeyPrefix + "adm:p:" + provider }

// DirectoryKey is the VM directory (node.go): live worker VMs and their heartbeats.
const DirectoryKey = state.KeyPrefix + "vms"

func connPart(provider, connection string) string {
	return strconv.Itoa(len(provider)) + ":" + provider + ":" + connection
}
