package admission

import "github.com/spillwayproxy/spillway/plugin/internal/state"

// Shared-data keys, one builder per record kind (record.go has the layouts; state's keys.go
// the layout of every key and whose each record is). The lease record is an account fact:
// every policy on the credential counts its leases there. Tickets and the pools are the
// policy's own, under its namespace.

// leaseKey is an account's lease record (account: a state.AccountID).
func leaseKey(account string) string { return state.KeyLease.Key(account) }

// ticketKey is the namespace's ticket record for an account's lease record.
func ticketKey(namespace, account string) string { return state.KeyTickets.Key(namespace, account) }

// globalPoolKey is the pool record of the namespace's global cap.
func globalPoolKey(namespace string) string { return state.KeyGlobalPool.Key(namespace) }

// providerPoolKey is the pool record of the namespace's cap on a provider.
func providerPoolKey(namespace, provider string) string {
	return state.KeyProviderPool.Key(namespace, provider)
}

// DirectoryKey is the VM directory (node.go): live worker VMs and their heartbeats.
var DirectoryKey = state.KeyDirectory.Key()
