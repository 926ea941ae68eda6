// varlen_f16_dims.cu: paged varlen attention with __half queries over a
// flash-layout __half cache for the head dims between the powers of two
// (80, 96, 112, 192): the entries of varlen_f16.cu (with _r64 below 128),
// their _mods twins and the split-K merges (see varlen.cuh). A module of
// their own, so that the other head dims' code and load time stay as they
// are.
#include "varlen.cuh"

PKV_VARLEN_MORE_DIMS(paged_varlen_f16, paged_varlen_merge_f16, __half)
