// decode_f16_e4m3_sm90.cu: paged decode attention kernels with __half queries and a fp8 e4m3 cache
// whose split-K blocks form a thread-block cluster and merge on chip, for
// every head dim, and the narrow kernels without clusters (_g8_sm90, one-instruction
// e4m3 moves), see decode.cuh, for caches in the flash layout
// (decode_f16_e4m3_laid_sm90.cu: the x-split and shuffle layouts). Compiled for compute_90 (ptxgen: the
// _sm90 suffix).
#include "decode.cuh"

PKV_DECODE_CLUSTER_ALL(paged_decode_f16_e4m3, __half, pkv::e4m3, pkv::kLayoutsFlash, )
PKV_DECODE_NARROW_CLUSTER_ALL(paged_decode_f16_e4m3, __half, pkv::e4m3, pkv::kLayoutsFlash, )
PKV_DECODE_NARROW_SM90_ALL(paged_decode_f16_e4m3, __half, pkv::e4m3, pkv::kLayoutsFlash, )
