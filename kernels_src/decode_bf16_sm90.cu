// decode_bf16_sm90.cu: paged decode attention kernels with __nv_bfloat16 queries and a __nv_bfloat16 cache
// whose split-K blocks form a thread-block cluster and merge on chip, for
// every head dim, for any GQA group and for groups up to 8 (_g8; see
// decode.cuh). Compiled for compute_90 (ptxgen: the
// _sm90 suffix).
#include "decode.cuh"

PKV_DECODE_CLUSTER_ALL(paged_decode_bf16, __nv_bfloat16, __nv_bfloat16, pkv::kLayoutsAny, )
PKV_DECODE_NARROW_CLUSTER_ALL(paged_decode_bf16, __nv_bfloat16, __nv_bfloat16, pkv::kLayoutsAny, )
