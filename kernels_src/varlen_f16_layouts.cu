// varlen_f16_layouts.cu: paged varlen attention with __half queries over a __half
// cache in the x-split and shuffle layouts, for every head dim (see
// varlen.cuh; the split-K merge is varlen_f16's).
#include "varlen.cuh"

PKV_VARLEN_LAYOUT_ALL(paged_varlen_f16, __half)
