// Package boundaries holds no code: its test enforces, over `go list -deps`, which packages
// of the module may depend on which (README "Layout").
package boundaries
