// decode_f16.cu: paged decode attention kernels with __half queries and a
// __half cache, for every head dim: one for any GQA group and one for groups up to 8
// (_g8, see decode.cuh).
#include "decode.cuh"

PKV_DECODE_ALL(paged_decode_f16, __half, __half, pkv::kLayoutsAny, )
PKV_DECODE_NARROW_ALL(paged_decode_f16, __half, __half, pkv::kLayoutsAny, )
