package hostsim

import "github.com/spillwayproxy/spillway/hostsim/internal/abi"

// Header lists as the model keeps them: [][2]string pairs, keys lower case as in Envoy's
// header maps.

// lowerKeys returns a copy of pairs with lower-cased keys.
func lowerKeys(pairs [][2]string) [][2]string {
	if pairs == nil {
		return nil
	}
	out := make([][2]string, len(pairs))
	for i, kv := range pairs {
		out[i] = [2]string{abi.LowerASCII(kv[0]), kv[1]}
	}
	return out
}

// appendLower appends pairs to dst with lower-cased keys.
func appendLower(dst, pairs [][2]string) [][2]string {
	for _, kv := range pairs {
		dst = append(dst, [2]string{abi.LowerASCII(kv[0]), kv[1]})
	}
	return dst
}

// clonePairs copies pairs (nil stays nil).
func clonePairs(pairs [][2]string) [][2]string {
	if pairs == nil {
		return nil
	}
	return append([][2]string(nil), pairs...)
}

// headerValue returns the first value of key in pairs.
func headerValue(pairs [][2]string, key string) (string, bool) {
	for _, kv := range pairs {
		if kv[0] == key {
			return kv[1], true
		}
	}
	return "", false
}
