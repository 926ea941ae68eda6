// varlen_bf16_e4m3.cu: paged varlen attention with __nv_bfloat16 queries and an fp8
// e4m3 cache, for every head dim (merged by paged_varlen_merge_bf16, see
// varlen.cuh).
#include "varlen.cuh"

PKV_VARLEN_ALL(paged_varlen_bf16_e4m3, __nv_bfloat16, pkv::e4m3)
