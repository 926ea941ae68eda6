// varlen_f16_sm90a.cu: paged varlen attention with __half queries and a
// __half cache in the flash or HND layout on Hopper's wgmma (the
// _wg entries, kLayoutWG in varlen.cuh; merges are varlen_f16.cu's).
// Compiled for sm_90a (ptxgen: the _sm90a suffix).
#include "varlen.cuh"

PKV_VARLEN_WG_ALL(paged_varlen_f16, __half)
