// varlen_bf16_layouts.cu: paged varlen attention with __nv_bfloat16 queries over a __nv_bfloat16
// or fp8 e4m3 cache in the x-split and shuffle layouts, for every head dim
// (see varlen.cuh; the split-K merge is varlen_bf16's).
#include "varlen.cuh"

PKV_VARLEN_LAYOUT_ALL(paged_varlen_bf16, __nv_bfloat16, __nv_bfloat16)
PKV_VARLEN_LAYOUT_K64(paged_varlen_bf16, __nv_bfloat16)
PKV_VARLEN_LAYOUT_ALL(paged_varlen_bf16_e4m3, __nv_bfloat16, pkv::e4m3)
