// varlen_f16_layouts.cu: paged varlen attention with __half queries over a __half
// or fp8 e4m3 cache in the x-split and shuffle layouts, for every head dim
// (see varlen.cuh; the split-K merge is varlen_f16's).
#include "varlen.cuh"

PKV_VARLEN_LAYOUT_ALL(paged_varlen_f16, __half, __half)
PKV_VARLEN_LAYOUT_K64(paged_varlen_f16, __half)
PKV_VARLEN_LAYOUT_ALL(paged_varlen_f16_e4m3, __half, pkv::e4m3)
