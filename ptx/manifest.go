package ptx

import "github.com/pagedkv/pagedkv/ptx/ptxfile"

// Manifest records how every embedded module was produced: the nvcc version
// and flags, and per module its source hashes, PTX hash and entry points. It
// is defined in ptxfile so that cmd/ptxgen can write it without depending on
// the embedded files it is about to generate.
type Manifest = ptxfile.Manifest

// ModuleInfo is one module's record in the Manifest.
type ModuleInfo = ptxfile.ModuleInfo
