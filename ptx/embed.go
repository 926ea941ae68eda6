package ptx

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// FS holds every generated module as <name>.ptx, and manifest.json.
//
//go:embed *.ptx manifest.json
var FS embed.FS

// Module returns the PTX text of the named module (a Module* constant, e.g.
// ModuleDecodeF16). An unknown name is an error listing the known ones. The
// returned slice is the caller's to keep or modify.
func Module(name string) ([]byte, error) { return module(FS, name) }

// Modules returns the names of the embedded modules, sorted.
func Modules() []string { return modules(FS) }

// ReadManifest decodes the embedded manifest.json.
func ReadManifest() (Manifest, error) { return readManifest(FS) }

func module(fsys fs.FS, name string) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, `/\.`) {
		return nil, fmt.Errorf("ptx: module %q is not a module name; known modules: %s",
			name, strings.Join(modules(fsys), ", "))
	}
	data, err := fs.ReadFile(fsys, name+".ptx")
	if err != nil {
		return nil, fmt.Errorf("ptx: unknown module %q; known modules: %s",
			name, strings.Join(modules(fsys), ", "))
	}
	return data, nil
}

func modules(fsys fs.FS) []string {
	paths, err := fs.Glob(fsys, "*.ptx")
	if err != nil {
		return nil // only for a malformed pattern, which "*.ptx" is not
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = strings.TrimSuffix(p, ".ptx")
	}
	slices.Sort(names)
	return names
}

func readManifest(fsys fs.FS) (Manifest, error) {
	data, err := fs.ReadFile(fsys, ptxfile.ManifestFile)
	if err != nil {
		return Manifest{}, fmt.Errorf("ptx: %w", err)
	}
	m, err := ptxfile.ParseManifest(data)
	if err != nil {
		return Manifest{}, fmt.Errorf("ptx: %w", err)
	}
	return m, nil
}
