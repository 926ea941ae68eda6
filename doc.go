// Package pagedkv runs paged-KV attention and KV-cache kernels on NVIDIA GPUs
// from pure Go: no cgo, and no CUDA toolkit to build or to run. It serves Go
// inference engines, which own the model, the scheduler and the block
// allocator; pagedkv owns the kernels that touch the paged cache.
//
// The ops, each a Runtime method taking an argument struct: Append and Gather
// (K/V rows into their cache slots, and the exact inverse), RopeCache (RoPE
// fused with the cache write), QKVNormRope (split a fused QKV activation,
// RMSNorm, RoPE, q out and K/V into the cache, for one sequence or a varlen
// batch), MLARopeQuant and MLAConcatQ (the MLA input step); and attention:
// Decode (batched decode, one query token per sequence), Varlen (prefill,
// chunked prefill, verify steps and mixed batches over the paged cache,
// causal or not) and SequenceAttention (one sequence's new tokens, picking
// Decode or Varlen). Queries and inputs are f16 or bf16; caches hold the same
// type or fp8 e4m3 with per-tensor scales, in the flash, x-split, shuffle or
// HND layout (CacheLayout). Attention takes head dims 64, 80, 96, 112, 120,
// 128, 192 and 256 (80 to 192 over caches of the queries' type, 96 and 192
// over fp8 ones too, and in Varlen the flash and HND layouts; 120 over those
// in Decode too), and GQA groups of 1 to 16, and the score modifiers of
// current models: a sliding window, logit soft-capping, attention sinks and
// ALiBi (Varlen: over the flash and HND layouts).
//
// A Runtime owns one device: its primary context, the modules it has loaded,
// its streams and their split-K scratch pools; it is safe for concurrent use.
// CUDA C kernels are compiled to PTX and to machine code (SASS) for sm_80,
// sm_86, sm_89 and sm_90, embedded in the binary (package ptx), and loaded by
// the driver (libcuda, opened at run time through package driver) when an op
// first needs them. PAGEDKV_LOAD_SASS picks the image: auto, the default,
// loads the driver JIT's own code where it is embedded for the device's
// architecture and the running driver is at least as new as the one that
// recorded it (on sm_90, for most varlen and fp8 decode modules, whose
// ptxas SASS runs slower; see ptx.JITFaster), else the SASS where the
// device runs it, else the PTX,
// which the driver JIT-compiles; 1 loads the SASS wherever there is some; 0
// always loads the PTX. Each op's plan
// (single-pass or split-K, and how many splits) comes from package dispatch,
// a pure function of the shape, the device and the configuration (package
// config: options, PAGEDKV_ environment, file).
//
// Every argument struct's Validate method checks each shape, dtype,
// alignment, stride and buffer capacity the host can see before anything is
// launched; its errors match ErrInvalidArgument. A Workspace's size depends
// on the plan, so the op checks it against the plan it makes, still before
// any launch. It also refuses an output
// that overlaps any other buffer of the call (ErrAliasing, naming both
// fields): the bytes compared run from each buffer's pointer to the last
// byte its shape reaches. No op works in place; inputs may overlap one
// another. Every op, and every method of Runtime, Stream, Graph, Timer,
// Event, Memory and HostMemory, returns an error for a nil or closed handle
// and for a Stream of another Runtime instead of panicking. Indices that live in device
// memory (slot mappings, block tables, kv lengths, query bounds) cannot be
// checked by the host without a copy. Kernels never read or write outside
// the buffers for any value of them: an out-of-range slot is not written, a
// kv length beyond the block table is clamped, a block id outside the pool
// reads block 0, and the first such fault of a stream is recorded in that
// stream's fault record. Stream.Fault reports it; with PAGEDKV_CHECK_BOUNDS=1
// every op synchronizes and returns it as an error.
//
// Decode, Varlen and SequenceAttention can be captured into CUDA graphs
// (Stream.BeginCapture); Decode and Varlen are planned for a KV capacity and
// replay with any lengths up to it. Reserve the stream's scratch first
// (ReserveDecode, ReserveVarlen, ReserveSequence), or pass a Workspace.
// A Graph keeps the scratch it captured until Graph.Close.
//
// The README has the support tables and measurements; docs/design.md the
// design, the planner's rules and the naming table.
package pagedkv
