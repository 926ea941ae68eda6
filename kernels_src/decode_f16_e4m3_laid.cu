// decode_f16_e4m3_laid.cu: the kernels of decode_f16_e4m3.cu for fp8 e4m3
// caches in the x-split and shuffle layouts (entries ending _laid): the
// build that reads every layout, chosen at run time, where decode_f16_e4m3.cu's
// reads the flash layout only (see kLayoutsAny in decode.cuh).
#include "decode.cuh"

PKV_DECODE_ALL(paged_decode_f16_e4m3, __half, pkv::e4m3, pkv::kLayoutsAny, _laid)
PKV_DECODE_NARROW_ALL(paged_decode_f16_e4m3, __half, pkv::e4m3, pkv::kLayoutsAny, _laid)
