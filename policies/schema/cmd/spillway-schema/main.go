// Command spillway-schema writes the policy's JSON Schema (policies/spillway.schema.json).
// Run it with `go generate ./policies` (see policies/doc.go).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/spillwayproxy/spillway/policies/schema"
)

func main() {
	dir := flag.String("dir", ".", "directory of package policies' source")
	out := flag.String("o", schema.FileName, "output file")
	flag.Parse()
	data, err := schema.Generate(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "spillway-schema:", err)
		os.Exit(1)
	}
}
