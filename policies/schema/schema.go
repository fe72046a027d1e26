// Package schema generates the JSON Schema of Spillway's policy from the Go model in package
// policies (field names from json tags, descriptions from doc comments, enums from the
// model's vocabulary), for editors and CI checks. It is a build-time tool, never linked
// into the filter.
package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/spillwayproxy/spillway/policies"
)

// FileName is the schema's file name next to the model: policies/spillway.schema.json.
const FileName = "spillway.schema.json"

// ID is the schema's $id.
const ID = "https://github.com/spillwayproxy/spillway/policies/" + FileName

// policiesPkg is the import path of the model package.
var policiesPkg = reflect.TypeOf(policies.Policy{}).PkgPath()

// Generate returns the policy's JSON Schema (indented, ending in a newline). policiesDir is
// the directory holding package policies' source, whose doc comments become descriptions.
func Generate(policiesDir string) ([]byte, error) {
	s, err := reflectSchema(policiesDir)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("schema: encode: %w", err)
	}
	return buf.Bytes(), nil
}

// reflectSchema builds the schema from the model.
func reflectSchema(policiesDir string) (*jsonschema.Schema, error) {
	comments, err := readComments(policiesDir)
	if err != nil {
		return nil, err
	}
	r := &jsonschema.Reflector{
		RequiredFromJSONSchemaTags: true,
		ExpandedStruct:             true,
		// A Secret is a string in the document (its Go fields only guard the value).
		Mapper: func(t reflect.Type) *jsonschema.Schema {
			if t == reflect.TypeFor[policies.Secret]() {
				return &jsonschema.Schema{Type: "string"}
			}
			return nil
		},
		LookupComment: func(t reflect.Type, field string) string {
			if t.PkgPath() != policiesPkg {
				return ""
			}
			if field == "" {
				return comments[t.Name()]
			}
			return comments[t.Name()+"."+field]
		},
	}
	s := r.Reflect(&policies.Policy{})
	s.ID = ID
	s.Title = "Spillway policy"
	if err := addVocabulary(s); err != nil {
		return nil, err
	}
	return s, nil
}

// addVocabulary adds what struct tags cannot say: enums from the model's lists (so they
// have one source) and constraints on map values and keys.
func addVocabulary(root *jsonschema.Schema) error {
	strs := func(list []string) []any {
		out := make([]any, len(list))
		for i, s := range list {
			out[i] = s
		}
		return out
	}
	profiles := make([]string, len(policies.Profiles))
	for i, p := range policies.Profiles {
		profiles[i] = string(p)
	}
	strategies := make([]string, len(policies.Strategies))
	for i, s := range policies.Strategies {
		strategies[i] = string(s)
	}
	modes := make([]string, len(policies.RoutingModes))
	for i, m := range policies.RoutingModes {
		modes[i] = string(m)
	}
	apis := make([]string, len(policies.APIs))
	for i, a := range policies.APIs {
		apis[i] = string(a)
	}
	routedPath := func(s *jsonschema.Schema) {
		s.Items.Pattern = "^/[^?#]*$"
		s.Items.MaxLength = ptr(uint64(256))
		s.UniqueItems = true
	}
	patches := []struct {
		def, prop string
		apply     func(*jsonschema.Schema)
	}{
		{"Provider", "profile", func(s *jsonschema.Schema) { s.Enum = strs(profiles) }},
		{"Provider", "api", func(s *jsonschema.Schema) { s.Enum = strs(apis) }},
		{"Route", "strategy", func(s *jsonschema.Schema) { s.Enum = strs(strategies) }},
		{"Routing", "mode", func(s *jsonschema.Schema) { s.Enum = strs(modes) }},
		{"RoutingPaths", "openai", routedPath},
		{"RoutingPaths", "anthropic", routedPath},
		{"ProviderErrorRule", "reason", func(s *jsonschema.Schema) { s.Enum = strs(policies.RuleReasons) }},
		{"ProviderErrorRule", "scope", func(s *jsonschema.Schema) { s.Enum = strs(policies.RuleScopes) }},
		{"BreakerProfile", "cooldownByKind", func(s *jsonschema.Schema) {
			s.PropertyNames = &jsonschema.Schema{Enum: strs(policies.FailureKinds)}
			s.AdditionalProperties.Minimum = "1000"
			s.AdditionalProperties.Maximum = "86400000"
		}},
		{"Connection", "modelConcurrency", func(s *jsonschema.Schema) {
			s.PropertyNames = &jsonschema.Schema{MinLength: ptr(uint64(1)), MaxLength: ptr(uint64(256))}
			s.AdditionalProperties.Minimum = "1"
			s.AdditionalProperties.Maximum = "100000"
		}},
		{"Provider", "quotaFamilies", func(s *jsonschema.Schema) {
			s.PropertyNames = &jsonschema.Schema{MinLength: ptr(uint64(1)), MaxLength: ptr(uint64(256))}
			s.AdditionalProperties.MinLength = ptr(uint64(1))
			s.AdditionalProperties.MaxLength = ptr(uint64(256))
		}},
	}
	statusLists := []struct{ def, prop string }{
		{"ProviderBreaker", "tripStatuses"},
		{"ModelLockout", "errorCodes"},
		{"RestatementRule", "fromStatuses"},
	}
	for _, sl := range statusLists {
		patches = append(patches, struct {
			def, prop string
			apply     func(*jsonschema.Schema)
		}{sl.def, sl.prop, func(s *jsonschema.Schema) {
			s.Items.Minimum = "100"
			s.Items.Maximum = "599"
			s.UniqueItems = true
		}})
	}
	for _, p := range patches {
		def, ok := root.Definitions[p.def]
		if !ok {
			return fmt.Errorf("schema: no definition %s", p.def)
		}
		prop, ok := def.Properties.Get(p.prop)
		if !ok {
			return fmt.Errorf("schema: no property %s.%s", p.def, p.prop)
		}
		p.apply(prop)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// readComments maps "Type" and "Type.Field" of the model's structs to their doc comments,
// with a leading Go field name replaced by its JSON name ("MaxWaitMs is" -> "maxWaitMs is").
func readComments(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	sort.Strings(files)
	fset := token.NewFileSet()
	out := make(map[string]string)
	found := false
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("schema: %w", err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("schema: %w", err)
		}
		if f.Name.Name != "policies" {
			continue
		}
		found = true
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				typeDoc := ts.Doc
				if typeDoc == nil && len(gen.Specs) == 1 {
					typeDoc = gen.Doc
				}
				out[ts.Name.Name] = clean(typeDoc.Text())
				for _, field := range st.Fields.List {
					if field.Doc == nil || len(field.Names) == 0 {
						continue
					}
					goName := field.Names[0].Name
					text := clean(field.Doc.Text())
					if jsonName := jsonName(field, goName); jsonName != "" {
						if rest, ok := strings.CutPrefix(text, goName+" "); ok {
							text = jsonName + " " + rest
						} else if rest, ok := strings.CutPrefix(text, goName+": "); ok {
							text = jsonName + ": " + rest
						}
					}
					out[ts.Name.Name+"."+goName] = text
				}
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("schema: no package policies source in %s", dir)
	}
	return out, nil
}

// jsonName returns a field's JSON name from its tag ("" for none or "-").
func jsonName(field *ast.Field, goName string) string {
	if field.Tag == nil {
		return goName
	}
	tag := reflect.StructTag(strings.Trim(field.Tag.Value, "`"))
	name, _, _ := strings.Cut(tag.Get("json"), ",")
	if name == "-" {
		return ""
	}
	if name == "" {
		return goName
	}
	return name
}

// clean joins a comment's lines into one paragraph.
func clean(text string) string {
	return strings.Join(strings.Fields(text), " ")
}
