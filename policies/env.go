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

// Environment variables that supply the request queue's defaults (guide §5). Precedence:
// built-in default < these < resilience.requestQueue < a connection's rateLimitOverrides.
// Parse reads them through ParseOptions.LookupEnv; an empty variable is unset.
const (
	EnvRequestQueueMaxWait          = "RATE_LIMIT_MAX_WAIT_MS"
	EnvRequestQueueExecutionMaxWait = "RATE_LIMIT_EXECUTION_MAX_WAIT_MS"
	EnvRequestQueueMaxDepth         = "RATE_LIMIT_MAX_QUEUE_DEPTH"
)

// readEnvQueue reads the queue defaults from the environment. A value that is not an integer
// is ignored with a warning (which never repeats the value).
func readEnvQueue(lookup func(string) (string, bool), warn func(path, message string)) RequestQueue {
	var q RequestQueue
	if lookup == nil {
		return q
	}
	read := func(name string) (int64, bool) {
		raw, ok := lookup(name)
		raw = strings.TrimSpace(raw)
		if !ok || raw == "" {
			return 0, false
		}
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			warn(envPath(name), "not a whole number; ignored")
			return 0, false
		}
		return n, true
	}
	if n, ok := read(EnvRequestQueueMaxWait); ok {
		q.MaxWaitMs = &n
	}
	if n, ok := read(EnvRequestQueueExecutionMaxWait); ok {
		q.ExecutionMaxWaitMs = &n
	}
	if n, ok := read(EnvRequestQueueMaxDepth); ok {
		depth := int(max(min(n, 1<<31-1), -(1 << 31))) // fits any int; clamped into range later
		q.MaxQueueDepth = &depth
	}
	return q
}

// envPath names an environment variable where a field path would go.
func envPath(name string) string { return "$" + name }

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
