// decode_f16.cu: paged decode attention kernels with __half queries and a
// __half cache, for every head dim and group tile (see decode.cuh).
#include "decode.cuh"

PKV_DECODE_ALL(paged_decode_f16, __half, __half)
