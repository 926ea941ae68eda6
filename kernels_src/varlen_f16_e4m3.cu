// varlen_f16_e4m3.cu: paged varlen attention with __half queries and an fp8
// e4m3 cache, for every head dim (merged by paged_varlen_merge_f16, see
// varlen.cuh).
#include "varlen.cuh"

PKV_VARLEN_ALL(paged_varlen_f16_e4m3, __half, pkv::e4m3)
