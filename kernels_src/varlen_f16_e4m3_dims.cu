// varlen_f16_e4m3_dims.cu: paged varlen attention with __half queries over
// a flash-layout fp8 e4m3 cache at head dims 96 and 192 (with _r64 at 96)
// and their _mods twins (see varlen.cuh); the split-K partials merge with
// varlen_f16_dims.cu's merges. A module of their own, so that the other
// modules' code (and the PTX their recorded JIT images must match) stays
// as it is.
#include "varlen.cuh"

PKV_VARLEN_FP8_DIMS(paged_varlen_f16_e4m3, __half)
