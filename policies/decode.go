package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// Why a strict decoder of our own: encoding/json's DisallowUnknownFields stops at the first
// unknown field and names it without its path, reports type errors without the list
// indexes, silently accepts duplicate keys (the last one wins) and cannot tell us which
// strings came from the environment. Operators need every problem at once, each with its
// full path ("resilience.modelLockout.baseCoolDownMs: unknown field"). So the document is
// first read into a small tree (encoding/json's tokenizer does the lexing), then walked
// alongside the model's Go types, which are described by their json tags only, so the model
// stays the single source of truth for names. Runs at configuration time only.

// maxDepth bounds nesting; the model is at most six levels deep.
const maxDepth = 32

type nodeKind uint8

const (
	nullNode nodeKind = iota
	boolNode
	numberNode
	stringNode
	objectNode
	arrayNode
)

// node is one JSON value. Objects keep their members in document order.
type node struct {
	kind    nodeKind
	boolean bool
	text    string // string value, or the number's literal text
	members []member
	items   []*node
}

type member struct {
	key   string
	value *node
}

// describe names a node's kind for error messages (never its value).
func (n *node) describe() string {
	switch n.kind {
	case nullNode:
		return "null"
	case boolNode:
		return "a boolean"
	case numberNode:
		return "a number"
	case stringNode:
		return "a string"
	case objectNode:
		return "an object"
	default:
		return "a list"
	}
}

// parseTree reads one JSON document into a tree, rejecting duplicate keys and trailing
// data. Its errors carry a line and column, never document content beyond one character.
func parseTree(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	root, err := readNode(dec, 0)
	if err != nil {
		return nil, describeSyntaxError(data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the policy object")
	}
	return root, nil
}

var errTooDeep = errors.New("nesting is too deep")

// readNode reads the value starting at the decoder's next token.
func readNode(dec *json.Decoder, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: nullNode}, nil
	case bool:
		return &node{kind: boolNode, boolean: t}, nil
	case json.Number:
		return &node{kind: numberNode, text: string(t)}, nil
	case string:
		return &node{kind: stringNode, text: t}, nil
	case json.Delim:
		switch t {
		case '{':
			n := &node{kind: objectNode}
			seen := make(map[string]struct{})
			for dec.More() {
				keyTok, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := keyTok.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				if _, dup := seen[key]; dup {
					return nil, &duplicateKeyError{key: key}
				}
				seen[key] = struct{}{}
				value, err := readNode(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.members = append(n.members, member{key: key, value: value})
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return n, nil
		case '[':
			n := &node{kind: arrayNode}
			for dec.More() {
				item, err := readNode(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, item)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return n, nil
		}
	}
	return nil, errors.New("unexpected token")
}

type duplicateKeyError struct{ key string }

func (e *duplicateKeyError) Error() string {
	return "duplicate key " + strconv.Quote(truncate(e.key, 64))
}

// describeSyntaxError adds a line and column to a JSON syntax error.
func describeSyntaxError(data []byte, err error) error {
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		line, col := lineColumn(data, syntax.Offset)
		return errors.New("invalid JSON at line " + strconv.Itoa(line) + ", column " +
			strconv.Itoa(col) + ": " + syntax.Error())
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("invalid JSON: unexpected end of input")
	}
	return errors.New("invalid JSON: " + err.Error())
}

// lineColumn converts a byte offset into a 1-based line and column.
func lineColumn(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	if offset < 0 {
		offset = 0
	}
	before := data[:offset]
	line = bytes.Count(before, []byte{'\n'}) + 1
	col = int(offset) - (bytes.LastIndexByte(before, '\n') + 1)
	if col < 1 {
		col = 1
	}
	return line, col
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// decoder walks a tree into a Go value, collecting every problem with its path.
type decoder struct {
	lookupEnv func(name string) (string, bool)
	errs      Errors
	// fromEnv holds the paths of strings that came (in part) from the environment: their
	// values must never appear in messages.
	fromEnv map[string]bool
	// failed holds the paths that already have a decoding error, so validation does not
	// report them twice.
	failed map[string]bool
	fields map[reflect.Type][]fieldInfo
}

type fieldInfo struct {
	name  string
	index int
}

func newDecoder(lookupEnv func(string) (string, bool)) *decoder {
	return &decoder{
		lookupEnv: lookupEnv,
		fromEnv:   make(map[string]bool),
		failed:    make(map[string]bool),
		fields:    make(map[reflect.Type][]fieldInfo),
	}
}

func (d *decoder) fail(path, message string) {
	d.errs.add(path, message)
	d.failed[path] = true
}

// fieldsOf lists a struct type's JSON fields.
func (d *decoder) fieldsOf(t reflect.Type) []fieldInfo {
	if fs, ok := d.fields[t]; ok {
		return fs
	}
	var fs []fieldInfo
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs = append(fs, fieldInfo{name: name, index: i})
	}
	d.fields[t] = fs
	return fs
}

// secretType is decoded as a string.
var secretType = reflect.TypeFor[Secret]()

// decode stores n into v (settable), reporting problems under path.
func (d *decoder) decode(n *node, v reflect.Value, path string) {
	if v.Type() == secretType {
		if s, ok := d.decodeString(n, path); ok {
			v.Set(reflect.ValueOf(NewSecret(s)))
		}
		return
	}
	if v.Kind() == reflect.Pointer {
		if n.kind == nullNode {
			return // null = unset
		}
		elem := reflect.New(v.Type().Elem())
		d.decode(n, elem.Elem(), path)
		v.Set(elem)
		return
	}
	if n.kind == nullNode {
		// YAML "key:" with no value; unset for optional blocks, lists and maps.
		switch v.Kind() {
		case reflect.Struct, reflect.Slice, reflect.Map:
			return
		}
		if path == "" {
			d.fail(path, "expected an object, got null")
			return
		}
		d.fail(path, "must not be null")
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.kind != arrayNode {
			d.fail(path, "expected a list, got "+n.describe())
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.items), len(n.items))
		for i, item := range n.items {
			d.decode(item, s.Index(i), joinIndex(path, i))
		}
		v.Set(s)
	case reflect.Map:
		if n.kind != objectNode {
			d.fail(path, "expected an object, got "+n.describe())
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.members))
		for _, mem := range n.members {
			elem := reflect.New(v.Type().Elem()).Elem()
			d.decode(mem.value, elem, joinKey(path, mem.key))
			m.SetMapIndex(reflect.ValueOf(mem.key).Convert(v.Type().Key()), elem)
		}
		v.Set(m)
	case reflect.String:
		if s, ok := d.decodeString(n, path); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		if n.kind != boolNode {
			d.fail(path, "expected true or false, got "+n.describe())
			return
		}
		v.SetBool(n.boolean)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.kind != numberNode {
			d.fail(path, "expected a whole number, got "+n.describe())
			return
		}
		i, whole, inRange := wholeNumber(n.text)
		if !whole {
			d.fail(path, "expected a whole number")
			return
		}
		if !inRange || v.OverflowInt(i) {
			d.fail(path, "number is out of range")
			return
		}
		v.SetInt(i)
	default:
		// A model type the decoder does not know: a programming error, caught by tests.
		d.fail(path, "policies: unsupported field type "+v.Type().String())
	}
}

// decodeString reads a string value with ${ENV} expanded.
func (d *decoder) decodeString(n *node, path string) (string, bool) {
	switch n.kind {
	case stringNode:
	case nullNode:
		d.fail(path, "must not be null")
		return "", false
	default:
		d.fail(path, "expected a string, got "+n.describe())
		return "", false
	}
	s, fromEnv, err := expandEnv(n.text, d.lookupEnv)
	if err != nil {
		d.fail(path, err.Error())
		return "", false
	}
	if fromEnv {
		d.fromEnv[path] = true
	}
	return s, true
}

func (d *decoder) decodeStruct(n *node, v reflect.Value, path string) {
	if n.kind != objectNode {
		d.fail(path, "expected an object, got "+n.describe())
		return
	}
	fields := d.fieldsOf(v.Type())
	for _, mem := range n.members {
		fieldPath := joinField(path, mem.key)
		found := false
		for _, f := range fields {
			if f.name == mem.key {
				d.decode(mem.value, v.Field(f.index), fieldPath)
				found = true
				break
			}
		}
		if found {
			continue
		}
		message := "unknown field"
		for _, f := range fields {
			if strings.EqualFold(f.name, mem.key) {
				message += " (did you mean " + strconv.Quote(f.name) + "?)"
				break
			}
		}
		d.fail(fieldPath, message)
	}
}

// parseWholeNumber parses a JSON number that must be an integer: 30000, -1, 3e4, 30000.0.
// ok is false for fractions and for integers beyond int64.
func parseWholeNumber(text string) (int64, bool) {
	n, whole, inRange := wholeNumber(text)
	return n, whole && inRange
}

// wholeNumber tells a fraction (whole=false) from an integer too large for int64
// (inRange=false).
func wholeNumber(text string) (n int64, whole, inRange bool) {
	if i, err := strconv.ParseInt(text, 10, 64); err == nil {
		return i, true, true
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false, false
	}
	if math.IsInf(f, 0) || f == math.Trunc(f) {
		if f < math.MinInt64 || f >= math.MaxInt64 || math.IsInf(f, 0) {
			return 0, true, false
		}
		return int64(f), true, true
	}
	return 0, false, false
}
