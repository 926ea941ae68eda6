// decode_bf16_dims.cu: paged decode attention with __nv_bfloat16 queries and cache
// for the head dims between the powers of two (80, 96, 112 and 192 in every
// layout, 120 in the flash layout): wide and narrow (_g8) entries and their
// _mods twins (see decode.cuh). A module of their own, so that the other head dims' code and
// load time stay as they are.
#include "decode.cuh"

PKV_DECODE_MORE_DIMS(paged_decode_bf16, __nv_bfloat16)
