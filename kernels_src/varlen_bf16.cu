// varlen_bf16.cu: paged varlen attention with __nv_bfloat16 queries and a __nv_bfloat16 cache, for
// every head dim (and the 64-key-tile entry at head dim 128), and the merge
// of its split-K partials (see varlen.cuh).
#include "varlen.cuh"

PKV_VARLEN_ALL(paged_varlen_bf16, __nv_bfloat16, __nv_bfloat16)
PKV_VARLEN_K64(paged_varlen_bf16, __nv_bfloat16)
PKV_VARLEN_MERGE_ALL(paged_varlen_merge_bf16, __nv_bfloat16)
