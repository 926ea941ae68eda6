// varlen_f16_hd120.cu: paged varlen attention with __half queries over a
// flash-layout __half cache at head dim 120, on tiles of 128 whose rows are
// zero-padded in shared memory (see paged_varlen in varlen.cuh): the
// 128-row and _r64 entries, their _mods twins and the split-K merge. A
// module of its own, so that the other modules' code (and the PTX their
// recorded JIT images must match) stays as it is.
#include "varlen.cuh"

PKV_VARLEN_PADDED(paged_varlen_f16, paged_varlen_merge_f16, __half, 128, 120)
