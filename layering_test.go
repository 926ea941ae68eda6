package pagedkv

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// opFiles are the op files of the root package, one per op family: each
// declares its ops' argument structs, their validation, kernel parameter
// structs and Runtime methods. Every other non-test file is shared: launching
// (launch.go), layouts (layout.go), validation (validate.go), the Runtime,
// streams, memory, modules and conversions. A helper that serves more than
// one op family is shared, not op-specific: tokenRows and cacheTarget (the
// cache-write checks of Append, RopeCache and QKVNormRope, once in
// cachewrite.go) live in layout.go.
var opFiles = []string{"cache.go", "rope.go", "qkv.go", "mla.go", "decode.go", "varlen.go", "sequence.go"}

// opFamily maps an op file that is part of another's family to that file:
// SequenceAttention runs Varlen over one sequence whose lengths travel as
// kernel parameters, which only the varlen op's own launch path can do.
var opFamily = map[string]string{"sequence.go": "varlen.go"}

// family returns the op family of file (an op file's own name unless
// opFamily maps it).
func family(file string) string {
	if f, ok := opFamily[file]; ok {
		return f
	}
	return file
}

// TestOpFilesStandSideBySide enforces the root package's layering: the op
// files stand side by side over the shared files, so an unexported
// identifier declared in an op file is used by that file (or its family,
// opFamily) alone. No other op
// file, and no shared file, may refer to it; what two files need lives in a
// shared file.
//
// How it is checked: the package's non-test files (those go/build selects)
// are parsed with go/parser and type-checked with go/types, which resolves
// every identifier to the object it names, past local shadowing and through
// selectors (fields, methods). Imported packages are stood in for by empty
// ones, so the check needs neither export data nor the go command; only the
// package's own identifiers matter here, and they resolve by scope, or for a
// selector through the package's own types. The objects counted as declared
// in an op file are its unexported package-level names (funcs, types, vars,
// consts) and the unexported methods and struct fields it declares; a use
// of one (types.Info.Uses) in another file fails the test, naming both
// places. An identifier the checker left unresolved (a selector on a value
// whose type came from a stand-in import, such as slices.Clone(args)[0].rows)
// fails the test too when another op file declares that name, so that no
// reference is skipped silently; give such a value an explicitly typed
// variable. A file declaring an argument struct (a type named …Args) must be
// listed in opFiles, so a new op file cannot escape the rule.
func TestOpFilesStandSideBySide(t *testing.T) {
	fset, files, info := typeCheckPackage(t)

	isOp := map[string]bool{}
	for _, name := range opFiles {
		require.Contains(t, files, name, "op file %s is not in the package", name)
		isOp[name] = true
	}
	for name, f := range files {
		for _, ts := range typeSpecs(f) {
			if strings.HasSuffix(ts.Name.Name, "Args") {
				assert.True(t, isOp[name], "%s declares the argument struct %s, so it is an op file: add it to opFiles", name, ts.Name.Name)
			}
		}
	}

	// The unexported objects each op file declares, and their names.
	declaredIn := map[types.Object]string{}
	opNames := map[string][]string{} // name → the op files declaring one by that name
	for id, obj := range info.Defs {
		file := filepath.Base(fset.Position(id.Pos()).Filename)
		if obj == nil || !isOp[file] || obj.Exported() || obj.Name() == "_" || !topLevel(obj) {
			continue
		}
		declaredIn[obj] = file
		if !slices.Contains(opNames[obj.Name()], file) {
			opNames[obj.Name()] = append(opNames[obj.Name()], file)
		}
	}
	for _, name := range opFiles {
		require.Contains(t, slices.Collect(maps.Values(declaredIn)), name, "found no unexported declaration in %s: the check is not seeing the file", name)
	}

	var violations []string
	usesShared := map[string]bool{} // op files seen using a shared file's unexported identifier
	for id, obj := range info.Uses {
		pos := fset.Position(id.Pos())
		file := filepath.Base(pos.Filename)
		if home, ok := declaredIn[obj]; ok && family(home) != family(file) {
			violations = append(violations, fmt.Sprintf("%s: uses %s, declared unexported in the op file %s (%s)",
				pos, obj.Name(), home, fset.Position(obj.Pos())))
		}
		if isOp[file] && obj.Pkg() != nil && obj.Pkg().Path() == modulePath && !obj.Exported() && topLevel(obj) {
			if home := filepath.Base(fset.Position(obj.Pos()).Filename); !isOp[home] {
				usesShared[file] = true
			}
		}
	}
	// Canary: the checker resolves across files (every op file uses shared
	// helpers such as errf).
	for _, name := range opFiles {
		assert.True(t, usesShared[name], "no use of a shared file's identifier was resolved in %s: cross-file resolution is broken", name)
	}

	// Identifiers left unresolved that could name an op file's declaration.
	for name, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok || ast.IsExported(id.Name) {
				return true
			}
			if _, def := info.Defs[id]; def {
				return true
			}
			if _, use := info.Uses[id]; use {
				return true
			}
			for _, home := range opNames[id.Name] {
				if family(home) != family(name) {
					violations = append(violations, fmt.Sprintf("%s: cannot tell which %s this is (its operand's type comes from an import, which the check stands in for) and %s declares one: give the operand an explicitly typed variable",
						fset.Position(id.Pos()), id.Name, home))
					break
				}
			}
			return true
		})
	}
	slices.Sort(violations)
	assert.Empty(t, strings.Join(violations, "\n"), "an op file's unexported identifiers are its own: move what several files share to launch.go, layout.go or validate.go")
}

// modulePath is the import path of the root package.
const modulePath = "github.com/pagedkv/pagedkv"

// typeCheckPackage parses the package's non-test files and type-checks them
// against stand-in imports, returning the files by base name and what the
// checker resolved.
func typeCheckPackage(t *testing.T) (*token.FileSet, map[string]*ast.File, *types.Info) {
	t.Helper()
	bp, err := build.ImportDir(".", 0)
	require.NoError(t, err)
	require.NotEmpty(t, bp.GoFiles)
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	var list []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		files[name] = f
		list = append(list, f)
	}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{
		Importer: stubImporter{},
		// The stand-in imports declare nothing, so every use of an imported
		// name is an error; the package's own names still resolve.
		Error: func(error) {},
	}
	pkg, _ := conf.Check(modulePath, fset, list, info)
	require.NotNil(t, pkg)
	return fset, files, info
}

// stubImporter imports every path as an empty, complete package named after
// the path's last element.
type stubImporter struct{}

func (stubImporter) Import(p string) (*types.Package, error) {
	pkg := types.NewPackage(p, path.Base(p))
	pkg.MarkComplete()
	return pkg, nil
}

// topLevel reports whether obj is declared at the top level of its file: a
// package-level name, or a method or struct field.
func topLevel(obj types.Object) bool {
	switch o := obj.(type) {
	case *types.Func:
		return o.Parent() == o.Pkg().Scope() || o.Signature().Recv() != nil
	case *types.Var:
		return o.IsField() || o.Parent() == o.Pkg().Scope()
	case *types.PkgName:
		return false
	}
	return obj.Parent() == obj.Pkg().Scope()
}

// typeSpecs returns the type declarations of f at package level.
func typeSpecs(f *ast.File) []*ast.TypeSpec {
	var out []*ast.TypeSpec
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
			for _, s := range g.Specs {
				out = append(out, s.(*ast.TypeSpec))
			}
		}
	}
	return out
}
