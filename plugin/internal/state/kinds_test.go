package state

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// kindConstants parses kinds.go and returns every Kind* constant with its byte.
func kindConstants(t *testing.T) map[string]byte {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "kinds.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]byte{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.CHAR {
					t.Fatalf("kind %s is not a character literal", name.Name)
				}
				v, _, _, err := strconv.UnquoteChar(strings.Trim(lit.Value, "'"), '\'')
				if err != nil || v > 0x7f {
					t.Fatalf("kind %s = %s is not one ASCII byte", name.Name, lit.Value)
				}
				out[name.Name] = byte(v)
			}
		}
	}
	return out
}

func TestKindsAreDistinctAndRegistered(t *testing.T) {
	consts := kindConstants(t)
	byByte := map[byte]string{}
	for name, b := range consts {
		if !strings.HasPrefix(name, "Kind") {
			t.Errorf("constant %s in kinds.go is not a Kind", name)
		}
		if other, dup := byByte[b]; dup {
			t.Errorf("kinds %s and %s share the byte %q", name, other, b)
		}
		byByte[b] = name
	}
	listed := map[byte]bool{}
	for _, k := range Kinds {
		if listed[k.Kind] {
			t.Errorf("kind %q listed twice in Kinds", k.Kind)
		}
		listed[k.Kind] = true
		if _, ok := byByte[k.Kind]; !ok || k.Owner == "" || k.Record == "" {
			t.Errorf("Kinds entry %+v is not a declared kind with an owner", k)
		}
	}
	if len(listed) != len(consts) {
		t.Errorf("Kinds lists %d kinds, kinds.go declares %d", len(listed), len(consts))
	}
}

// TestEveryRecordUsesItsOwnKind walks the engine packages' sources: every NewEncoder and
// NewDecoder call names its kind through a state.Kind* constant (directly or through a
// package constant set to one), and that kind belongs to the calling package.
func TestEveryRecordUsesItsOwnKind(t *testing.T) {
	consts := kindConstants(t)
	owner := map[byte]string{}
	for _, k := range Kinds {
		owner[k.Kind] = k.Owner
	}
	root := ".."
	dirs, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, dir := range dirs {
		if !dir.IsDir() || dir.Name() == "state" {
			continue
		}
		pkg := dir.Name()
		fset := token.NewFileSet()
		var files []*ast.File
		paths, _ := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		// Package-level constants, to resolve `recordKind = state.KindBreaker`.
		local := map[string]ast.Expr{}
		for _, f := range files {
			for _, decl := range f.Decls {
				if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.CONST {
					for _, spec := range gen.Specs {
						vs := spec.(*ast.ValueSpec)
						for i, name := range vs.Names {
							if i < len(vs.Values) {
								local[name.Name] = vs.Values[i]
							}
						}
					}
				}
			}
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "NewEncoder" && sel.Sel.Name != "NewDecoder") {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "state" {
					return true
				}
				calls++
				at := fset.Position(call.Pos())
				arg := call.Args[1]
				if id, ok := arg.(*ast.Ident); ok {
					arg = local[id.Name]
				}
				ks, ok := arg.(*ast.SelectorExpr)
				if !ok || ks.X.(*ast.Ident).Name != "state" {
					t.Errorf("%s: record kind is not a state.Kind* constant", at)
					return true
				}
				b, ok := consts[ks.Sel.Name]
				if !ok {
					t.Errorf("%s: state.%s is not a registered kind", at, ks.Sel.Name)
					return true
				}
				if owner[b] != pkg {
					t.Errorf("%s: package %s uses kind %s owned by %s", at, pkg, ks.Sel.Name, owner[b])
				}
				return true
			})
		}
	}
	if calls < len(Kinds) {
		t.Errorf("found %d encoder/decoder calls, fewer than the %d kinds: the walk is broken", calls, len(Kinds))
	}
}
