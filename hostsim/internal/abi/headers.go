package abi

// Header lists as Envoy's model keeps them: [][2]string pairs, keys lower case as in
// Envoy's header maps.

// LowerKeys returns a copy of pairs with lower-cased keys (nil stays nil).
func LowerKeys(pairs [][2]string) [][2]string {
	if pairs == nil {
		return nil
	}
	out := make([][2]string, len(pairs))
	for i, kv := range pairs {
		out[i] = [2]string{LowerASCII(kv[0]), kv[1]}
	}
	return out
}

// AppendLower appends pairs to dst with lower-cased keys.
func AppendLower(dst, pairs [][2]string) [][2]string {
	for _, kv := range pairs {
		dst = append(dst, [2]string{LowerASCII(kv[0]), kv[1]})
	}
	return dst
}

// ClonePairs copies pairs (nil stays nil).
func ClonePairs(pairs [][2]string) [][2]string {
	if pairs == nil {
		return nil
	}
	return append([][2]string(nil), pairs...)
}

// HeaderValue returns the first value of key in pairs.
func HeaderValue(pairs [][2]string, key string) (string, bool) {
	for _, kv := range pairs {
		if kv[0] == key {
			return kv[1], true
		}
	}
	return "", false
}

// SetHeader sets the first key in h to v, or appends it.
func SetHeader(h [][2]string, k, v string) [][2]string {
	for i := range h {
		if h[i][0] == k {
			h[i][1] = v
			return h
		}
	}
	return append(h, [2]string{k, v})
}

// RemoveHeader returns h without any entry for key k (every value, as Envoy's
// HeaderMap::remove), h itself when it has none.
func RemoveHeader(h [][2]string, k string) [][2]string {
	n := 0
	for _, kv := range h {
		if kv[0] == k {
			n++
		}
	}
	if n == 0 {
		return h
	}
	out := make([][2]string, 0, len(h)-n)
	for _, kv := range h {
		if kv[0] != k {
			out = append(out, kv)
		}
	}
	return out
}
