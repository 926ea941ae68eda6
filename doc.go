// Package pagedkv runs paged-KV attention and KV-cache kernels on NVIDIA GPUs
// from pure Go: no cgo, and no CUDA toolkit to build or to run.
//
// CUDA C kernels are compiled to PTX once (cmd/ptxgen), embedded in the
// binary (package ptx), JIT-loaded by the driver on first use, and launched
// through the CUDA driver API (package driver, bound at run time with purego).
// A Runtime owns one device: its primary context, its loaded modules, its
// streams and its split-K scratch pools. The ops: Append and Gather (paged
// cache writes and their inverse, in the flash, x-split and shuffle layouts),
// RopeCache (RoPE fused with the cache write), QKVNormRope (split QKV, RMSNorm,
// RoPE, cache write; varlen), MLARopeQuant and MLAConcatQ (MLA inputs), and
// Decode (batched paged decode attention). Each op takes an argument struct whose
// Validate method checks every shape, dtype, alignment and buffer capacity the
// host can see before anything is launched; the op's plan comes from package
// dispatch, a pure function of the shape, the device and the configuration.
//
// Indices that live in device memory (slot mappings, block tables, kv
// lengths) cannot be checked by the host without a copy. Kernels never read
// or write outside the buffers for any value of them: an out-of-range slot is
// not written, a kv length beyond the block table is clamped, a block id
// outside the pool reads block 0, and the first such fault of a stream is
// recorded in that stream's fault record. Stream.Fault reports it; with
// PAGEDKV_CHECK_BOUNDS=1 every op synchronizes and returns it as an error.
package pagedkv
