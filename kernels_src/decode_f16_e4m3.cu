// decode_f16_e4m3.cu: paged decode attention kernels with __half queries and a
// fp8 e4m3 cache, for every head dim: one for any GQA group and one for groups up to 8
// (_g8, see decode.cuh), for caches in the flash layout
// (decode_f16_e4m3_laid.cu: the x-split and shuffle layouts).
#include "decode.cuh"

PKV_DECODE_ALL(paged_decode_f16_e4m3, __half, pkv::e4m3, pkv::kLayoutsFlash, )
PKV_DECODE_NARROW_ALL(paged_decode_f16_e4m3, __half, pkv::e4m3, pkv::kLayoutsFlash, )
