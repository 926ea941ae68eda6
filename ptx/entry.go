package ptx

import "github.com/pagedkv/pagedkv/ptx/ptxfile"

// Entry is a kernel entry point declared in PTX with .entry, with its
// parameters in launch-argument order.
type Entry = ptxfile.Entry

// Param is one parameter of an Entry: its PTX type, size and alignment.
type Param = ptxfile.Param

// Entries parses every .entry directive in ptxText; see ptxfile.Entries.
// Tests use it to check that a kernel's Go argument struct matches the
// parameter list in the embedded PTX.
func Entries(ptxText []byte) ([]Entry, error) { return ptxfile.Entries(ptxText) }

// ModuleEntries parses the entry points of the named embedded module.
func ModuleEntries(name string) ([]Entry, error) {
	data, err := Module(name)
	if err != nil {
		return nil, err
	}
	return Entries(data)
}
