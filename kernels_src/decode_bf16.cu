// decode_bf16.cu: paged decode attention kernels with __nv_bfloat16 queries and a
// __nv_bfloat16 cache, for every head dim: one for any GQA group and one for groups up to 8
// (_g8, see decode.cuh).
#include "decode.cuh"

PKV_DECODE_ALL(paged_decode_bf16, __nv_bfloat16, __nv_bfloat16, pkv::kLayoutsAny, )
PKV_DECODE_NARROW_ALL(paged_decode_bf16, __nv_bfloat16, __nv_bfloat16, pkv::kLayoutsAny, )
