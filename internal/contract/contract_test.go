package contract

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"testing"
)

// TestHeaderCurrent: the checked-in header is what the generator writes now
// (run `make generate` after a change of contract.go).
func TestHeaderCurrent(t *testing.T) {
	got, err := os.ReadFile(filepath.Join("..", "..", HeaderPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, Header()) {
		t.Fatalf("%s is out of date: run `make generate` (go generate ./internal/contract) and commit it", HeaderPath)
	}
}

// TestTableComplete: every constant of contract.go reaches C.
func TestTableComplete(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "contract.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					consts = append(consts, n.Name)
				}
			}
		}
	}
	if len(consts) != len(Defines) {
		t.Fatalf("contract.go has %d constants, table.go exports %d: add the new one to Defines", len(consts), len(Defines))
	}
}
