// decode_f16_e4m3_dims.cu: paged decode attention with __half queries and
// an fp8 e4m3 cache at head dims 96 and 192, every layout: wide and narrow
// (_g8) entries and their _mods twins (see decode.cuh). A module of their
// own, so that the other modules' code (and the PTX their recorded JIT
// images must match) stays as it is.
#include "decode.cuh"

PKV_DECODE_FP8_DIMS(paged_decode_f16_e4m3, __half)
