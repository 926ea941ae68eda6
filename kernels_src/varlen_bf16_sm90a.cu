// varlen_bf16_sm90a.cu: paged varlen attention with __nv_bfloat16 queries and a
// __nv_bfloat16 cache in the flash or HND layout on Hopper's wgmma (the
// _wg entries, kLayoutWG in varlen.cuh; merges are varlen_bf16.cu's).
// Compiled for sm_90a (ptxgen: the _sm90a suffix).
#include "varlen.cuh"

PKV_VARLEN_WG_ALL(paged_varlen_bf16, __nv_bfloat16)
