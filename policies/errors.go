package policies

import (
	"strconv"
	"strings"
)

// FieldError is one problem in a policy: the field path (e.g.
// "routes[2].targets[0].provider", "" for the document itself) and what is wrong with it.
// Messages never contain a credential or any other value that came from the environment.
type FieldError struct {
	Path    string
	Message string
}

// Error formats the problem as "path: message".
func (e FieldError) Error() string {
	path := e.Path
	if path == "" {
		path = "(root)"
	}
	return path + ": " + e.Message
}

// Errors lists every problem found in a policy, in document order. Parse returns it (as
// error) for invalid input; use errors.As to get at the individual fields.
type Errors []FieldError

// Error lists every problem, one per line, as "path: message", after the package name:
// "policies: providers[0].id: required", or "policies: 2 problems:" and one line each.
func (errs Errors) Error() string {
	var b strings.Builder
	b.WriteString("policies: ")
	switch len(errs) {
	case 0:
		b.WriteString("no problems")
	case 1:
		b.WriteString(errs[0].Error())
	default:
		b.WriteString(strconv.Itoa(len(errs)))
		b.WriteString(" problems:")
		for _, e := range errs {
			b.WriteString("\n")
			b.WriteString(e.Error())
		}
	}
	return b.String()
}

// add appends a problem.
func (errs *Errors) add(path, message string) {
	*errs = append(*errs, FieldError{Path: path, Message: message})
}

// joinField appends a field name to a path.
func joinField(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// joinIndex appends a list index to a path.
func joinIndex(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// joinKey appends a map key to a path, quoted: modelConcurrency["gpt-4o"].
func joinKey(path, key string) string {
	return path + "[" + strconv.Quote(key) + "]"
}
