// Package scratch is pagedkv's pool of f32 split-K partial buffers: one buffer
// per CUDA stream, grown lazily, freed in stream order. It talks to the GPU only
// through the small Allocator interface, which the root package implements with
// the driver's stream-ordered allocator and tests implement with a fake.
package scratch
