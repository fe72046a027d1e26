// Command spillway-schema writes the policy's JSON Schema (policies/spillway.schema.json)
// and its Markdown field reference (policies/REFERENCE.md). Run it with
// `go generate ./policies` (see policies/doc.go).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/spillwayproxy/spillway/policies/schema"
)

func main() {
	dir := flag.String("dir", ".", "directory of package policies' source")
	out := flag.String("o", schema.FileName, "JSON Schema output file")
	md := flag.String("md", schema.ReferenceFileName, "Markdown reference output file (empty = none)")
	flag.Parse()
	if err := write(*out, schema.Generate, *dir); err != nil {
		fail(err)
	}
	if *md != "" {
		if err := write(*md, schema.Reference, *dir); err != nil {
			fail(err)
		}
	}
}

func write(path string, generate func(string) ([]byte, error), dir string) error {
	data, err := generate(dir)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("spillway-schema: %w", err)
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
