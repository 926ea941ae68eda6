package ptx

import "github.com/pagedkv/pagedkv/ptx/ptxfile"

// Manifest records how every embedded module was produced: the nvcc and
// ptxas versions and flags, and per module its source hashes, PTX hash,
// entry points and the hash and size of each cubin (SASS) assembled from the
// PTX. It
// is defined in ptxfile so that cmd/ptxgen can write it without depending on
// the embedded files it is about to generate.
type Manifest = ptxfile.Manifest

// ModuleInfo is one module's record in the Manifest.
type ModuleInfo = ptxfile.ModuleInfo

// SASSImage is one cubin in a ModuleInfo: the architecture ptxas assembled
// the module's PTX for, and the cubin's hash and size.
type SASSImage = ptxfile.SASSImage

// JITRecord lists the machine code the driver's JIT made of modules' PTX,
// harvested from its JIT cache on GPUs (jit.json). It is defined in
// ptxfile beside the Manifest.
type JITRecord = ptxfile.JITRecord

// JITImage is one recorded cubin in a JITRecord: the module, the
// architecture and driver it was made for and by, the hash of the PTX it
// was made from, and the cubin's hash and size.
type JITImage = ptxfile.JITImage
