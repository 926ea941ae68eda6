// varlen_f16.cu: paged varlen attention with __half queries and a __half cache, for
// every head dim (and the 64-key-tile entry at head dim 128), and the merge
// of its split-K partials (see varlen.cuh).
#include "varlen.cuh"

PKV_VARLEN_ALL(paged_varlen_f16, __half, __half)
PKV_VARLEN_K64(paged_varlen_f16, __half)
PKV_VARLEN_MERGE_ALL(paged_varlen_merge_f16, __half)
