// Package ptx holds the CUDA kernels as PTX text, compiled from kernels_src/
// by cmd/ptxgen and embedded in the binary, together with the manifest that
// records how each module was built and the names of its entry points. The
// driver JIT-compiles the PTX at load time, so no CUDA toolkit is needed to
// build or run pagedkv. Beside each module's PTX lies its machine code
// (SASS): cubins that ptxas assembled from that PTX for sm_80, sm_86, sm_89
// and sm_90 (sm_90 only for the *_sm90 modules), embedded gzip-compressed;
// SASS picks the one a device runs, which loads without the JIT.
//
// Everything here except embed.go, manifest.go, entry.go, arch.go, doc.go and
// the tests is generated: run `go run ./cmd/ptxgen` (needs nvcc 11.8 and its
// ptxas) after changing kernels_src/. A test fails when the manifest no
// longer matches the sources, or an embedded PTX or cubin its manifest hash.
package ptx
