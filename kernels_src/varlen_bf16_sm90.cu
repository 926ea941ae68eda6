// varlen_bf16_sm90.cu: paged varlen attention with __nv_bfloat16 queries and a __nv_bfloat16
// cache whose split-K blocks of a row tile form a thread-block cluster and
// merge on chip, for the flash-layout entries of varlen_bf16.cu (see
// varlen.cuh). Compiled for compute_90 (ptxgen: the _sm90 suffix).
#include "varlen.cuh"

PKV_VARLEN_CLUSTER_ALL(paged_varlen_bf16, __nv_bfloat16)
