package pagedkv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeGoBlocksAreExamples keeps the README's Go code compiling: every
// ```go block in README.md must be, verbatim, the body of an Example
// function in example_test.go (one indentation level removed), which `go
// test` compiles. To show other code in the README, write it as an Example
// first.
func TestReadmeGoBlocksAreExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	src, err := os.ReadFile("example_test.go")
	require.NoError(t, err)

	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "example_test.go", src, parser.ParseComments)
	require.NoError(t, err)
	bodies := map[string]string{} // body text → Example name
	for _, d := range file.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
			continue
		}
		// The lines between the braces, less the one tab gofmt indents them by.
		open := fset.Position(fn.Body.Lbrace).Offset
		end := fset.Position(fn.Body.Rbrace).Offset
		inner := string(src[open+1 : end])
		inner = strings.TrimPrefix(inner, "\n")
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(inner, "\n\t "), "\n") {
			lines = append(lines, strings.TrimPrefix(l, "\t"))
		}
		bodies[strings.Join(lines, "\n")] = fn.Name.Name
	}
	require.NotEmpty(t, bodies, "example_test.go has no Example functions")

	blocks := readmeGoBlocks(string(readme))
	require.NotEmpty(t, blocks, "README.md has no ```go block (its quick start should show an Example)")
	for _, b := range blocks {
		_, ok := bodies[b.text]
		assert.True(t, ok, "README.md:%d: this ```go block is not the body of an Example in example_test.go; copy the Example's body verbatim (gofmt'd, one tab removed)", b.line)
	}
}

// readmeBlock is one fenced ```go block of a Markdown file: its text without
// the fences and trailing blank space, and the line of its opening fence.
type readmeBlock struct {
	text string
	line int
}

// readmeGoBlocks returns the ```go blocks of a Markdown text.
func readmeGoBlocks(md string) []readmeBlock {
	var (
		blocks []readmeBlock
		cur    []string
		start  int
		in     bool
	)
	for i, l := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case !in && trimmed == "```go":
			in, start, cur = true, i+1, nil
		case in && trimmed == "```":
			in = false
			blocks = append(blocks, readmeBlock{strings.TrimRight(strings.Join(cur, "\n"), "\n\t "), start})
		case in:
			cur = append(cur, l)
		}
	}
	return blocks
}
