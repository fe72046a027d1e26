package streaminfo

import "strings"

// ReplaceAllEmptySpace is StringUtil::replaceAllEmptySpace, which Envoy applies to the
// details a plugin gives proxy_send_local_response (Context::sendLocalResponse) and to the
// reset details the router builds: every space, tab, form feed, vertical tab, newline and
// carriage return becomes '_'.
func ReplaceAllEmptySpace(s string) string {
	if !strings.ContainsAny(s, " \t\f\v\n\r") {
		return s
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\f', '\v', '\n', '\r':
			return '_'
		}
		return r
	}, s)
}
