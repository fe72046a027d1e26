package policies

import (
	"strconv"
	"strings"
)

// Environment expansion in string values:
//
//	${NAME}          the variable's value; an error when it is not set
//	${NAME:-default} the variable's value, or default when it is unset or empty
//	$${              a literal "${" (so "$${HOME}" stays "${HOME}")
//
// NAME is [A-Za-z_][A-Za-z0-9_]*; default is literal text up to the first '}'. A '$' not
// followed by '{' is kept as is. Only values are expanded, never keys.

// envError is an expansion problem; its message never contains a variable's value.
type envError struct {
	message string
}

func (e *envError) Error() string { return e.message }

// expandEnv expands s. expanded reports whether any variable was substituted (then the
// result may hold a secret and must never be echoed).
func expandEnv(s string, lookup func(name string) (string, bool)) (result string, expanded bool, err error) {
	if strings.IndexByte(s, '$') < 0 {
		return s, false, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' {
			b.WriteByte(c)
			i++
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", false, &envError{"unterminated ${ (write $${ for a literal ${)"}
			}
			body := s[i+2 : i+2+end]
			name, def, hasDefault := strings.Cut(body, ":-")
			if !validEnvName(name) {
				return "", false, &envError{"invalid environment variable name " + quoteName(name) +
					" (want letters, digits and '_', not starting with a digit)"}
			}
			value, ok := "", false
			if lookup != nil {
				value, ok = lookup(name)
			}
			switch {
			case hasDefault && (!ok || value == ""):
				b.WriteString(def)
			case !ok:
				return "", false, &envError{"environment variable " + quoteName(name) + " is not set"}
			default:
				b.WriteString(value)
			}
			expanded = true
			i += 2 + end + 1
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), expanded, nil
}

// validEnvName reports whether name is a portable environment variable name.
func validEnvName(name string) bool {
	if name == "" || len(name) > 256 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// quoteName quotes a variable name for an error message, shortened if absurdly long. A
// name is part of the policy text, not a secret.
func quoteName(name string) string {
	if len(name) > 64 {
		name = name[:64] + "..."
	}
	return strconv.Quote(name)
}
