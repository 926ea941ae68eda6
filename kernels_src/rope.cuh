// rope.cuh: the rotary position embedding shared by rope.cu and mla.cu.
//
// cos_sin is f32 [max_pos, 2·rot]: a row holds rot cosines, then rot sines;
// rot = dim (one value per element) or dim/2 (one per rotated pair). NeoX
// rotates halves (x[j], x[j + dim/2]); GPT-J interleaved pairs (x[2i],
// x[2i+1]); out1 = x1·c1 − x2·s1, out2 = x2·c2 + x1·s2, in f32.
#pragma once
#include "cache.cuh"

namespace pkv {

// rotate8 rotates one 16-byte piece (see rope.cu): for NeoX the piece at
// element c·8 of the first half with its partner in the second half, for
// GPT-J 4 interleaved pairs; o1 (and o2 for NeoX) receive the results.
template <typename In>
__device__ __forceinline__ void rotate8(const In* src, const float* row, int rot, int dim, bool neox,
                                        int c, float o1[8], float o2[8], int* ea, int* eb) {
  const int half = dim >> 1;
  if (neox) {
    *ea = c * 8;
    *eb = c * 8 + half;
    float x1[8], x2[8];
    to_float8(load8(src + *ea), src, x1);
    to_float8(load8(src + *eb), src, x2);
    const float* c1 = row + (rot == dim ? *ea : c * 8);
    const float* c2 = row + (rot == dim ? *eb : c * 8);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      o1[e] = x1[e] * c1[e] - x2[e] * c1[rot + e];
      o2[e] = x2[e] * c2[e] + x1[e] * c2[rot + e];
    }
  } else {
    *ea = c * 8;
    *eb = -1;
    float x[8];
    to_float8(load8(src + *ea), src, x);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const int ca = rot == dim ? *ea + 2 * p : (*ea >> 1) + p;
      const int cb = rot == dim ? *ea + 2 * p + 1 : (*ea >> 1) + p;
      o1[2 * p] = x[2 * p] * row[ca] - x[2 * p + 1] * row[rot + ca];
      o1[2 * p + 1] = x[2 * p + 1] * row[cb] + x[2 * p] * row[rot + cb];
    }
  }
}

}  // namespace pkv
