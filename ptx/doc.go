// Package ptx holds the CUDA kernels as PTX text, compiled from kernels_src/
// by cmd/ptxgen and embedded in the binary, together with the manifest that
// records how each module was built and the names of its entry points. The
// driver JIT-compiles the PTX at load time, so no CUDA toolkit is needed to
// build or run pagedkv.
//
// Everything here except embed.go, manifest.go, entry.go, arch.go, doc.go and
// the tests is generated: run `go run ./cmd/ptxgen` (needs nvcc 11.8) after
// changing kernels_src/. A test fails when the manifest no longer matches the
// sources.
package ptx
