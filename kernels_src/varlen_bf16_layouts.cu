// varlen_bf16_layouts.cu: paged varlen attention with __nv_bfloat16 queries over a __nv_bfloat16
// cache in the x-split and shuffle layouts, for every head dim (see
// varlen.cuh; the split-K merge is varlen_bf16's).
#include "varlen.cuh"

PKV_VARLEN_LAYOUT_ALL(paged_varlen_bf16, __nv_bfloat16)
