// Package ptx holds the CUDA kernels as PTX text, compiled from kernels_src/
// by cmd/ptxgen and embedded in the binary, together with the manifest that
// records how each module was built and the names of its entry points. The
// driver JIT-compiles the PTX at load time, so no CUDA toolkit is needed to
// build or run pagedkv. Beside each module's PTX lies its machine code
// (SASS): cubins that ptxas assembled from that PTX for sm_80, sm_86, sm_89
// and sm_90 (sm_90 only for the *_sm90 modules, sm_90a only for the
// arch-specific *_sm90a modules, which run on compute capability 9.0 only:
// ModuleRunsOn), embedded gzip-compressed; SASS picks the one a device
// runs, which loads without the JIT. Where
// ptxas's code runs slower than the driver JIT's (JITFaster), the JIT's own
// code is harvested from the driver's JIT cache on a GPU (`STEPS=jitharvest
// scripts/gpu.sh`, then `scripts/jit_harvest.py`) into jit.json and
// <name>.sm_XX.jit.cubin.gz; JITCubin returns it.
//
// Everything here except embed.go, manifest.go, entry.go, arch.go, doc.go,
// the recorded JIT files and the tests is generated: run `go run
// ./cmd/ptxgen` (needs nvcc 11.8 and its ptxas, and for *_sm90a modules
// CUDA 12.4's ptxas) after changing kernels_src/.
// A test fails when the manifest no longer matches the sources, an embedded
// PTX or cubin its manifest hash, or a recorded JIT cubin the PTX it was
// made from (harvest it again on a GPU, or delete it).
package ptx
