// rope.cu: rotary position embedding fused with the paged KV-cache write.
//
// rope_cache_<in>[_e4m3]
//   q            [num_tokens, num_q_heads, head_dim] of <in> at strides (token, head)
//   k, v         [num_kv_tokens, num_kv_heads, head_dim] of <in> at strides; the
//                first num_tokens tokens are rotated, the trailing
//                num_kv_tokens - num_tokens are KV-only: no RoPE, cached as given.
//   positions    int64 [num_tokens]; offsets (optional) int64 [num_tokens] are
//                added. A position outside [0, max_pos) is recorded in fault
//                (code 5) and nothing of that token is written.
//   cos_sin      f32 [max_pos, 2·rot]: a row holds rot cosines, then rot sines.
//                rot = head_dim: one value per element; rot = head_dim/2: one
//                per rotated pair (element j and j + head_dim/2 for NeoX, 2i
//                and 2i+1 for GPT-J).
//   neox         1: rotate halves (x[j], x[j + D/2]); 0: GPT-J, interleaved
//                pairs (x[2i], x[2i+1]). out1 = x1·c1 − x2·s1,
//                out2 = x2·c2 + x1·s2, in f32. Threads move 16-byte pieces:
//                with head_dim/2 a multiple of 8, a NeoX piece of the first
//                half and its partner in the second; otherwise one piece, its
//                NeoX partners read as two 8-byte halves (rotate8_across).
//                head_dim is a multiple of 8 from 16 to 256.
//   q_out        [num_tokens, num_q_heads, head_dim] rotated q; k_out
//                [num_tokens, num_kv_heads, head_dim] rotated k (contiguous);
//                zeros_out (optional) shaped like q_out, written with zeros.
//   key_cache,   layout as cache.cuh; <in> or fp8 e4m3 (value / scale, nearest
//   value_cache  even, saturated) for _e4m3. k goes in rotated (KV-only tokens
//                as given), v as given. Slot rules as cache_append (negative
//                skips, optional remap, out of range recorded and skipped).
//                A null value_cache leaves V to rope_values (below): rope_cache
//                then writes q, k_out and K only.
// Grid: num_kv_tokens blocks of 128 threads, one token each; each KV head is
// written once whatever the GQA group. No shared memory.
//
// rope_values_<in>[_e4m3]: the V rows of a rope_cache call into the x-split
// or shuffle layout, where V is token-minor and rope_cache would store it
// element by element: cache_append's token path without keys (append.cuh),
// so that runs of 8 or 16 consecutive slots of a page are written as whole
// pieces. Slots as rope_cache resolves them (RopeSlots), faults left to
// rope_cache. Grid and block as cache_append (dispatch.PlanRope).
#include "append.cuh"
#include "rope.cuh"

namespace pkv {

// Flag carries a bool as a type, for a generic lambda to branch on at
// compile time.
template <bool B>
struct Flag {
  static constexpr bool value = B;
};

// rotate8_across rotates the 16-byte piece c (elements 8c..8c+7) NeoX-style
// for a head_dim whose halves are not whole pieces (head_dim/2 a multiple of
// 4, not of 8): each 4-element half of the piece lies within one half of the
// head, and its partners, (j + dim/2) mod dim, are one 8-byte load. o
// receives the piece's results.
template <typename In>
__device__ __forceinline__ void rotate8_across(const In* src, const float* row, int rot, int dim, int c,
                                               float o[8]) {
  const int half = dim >> 1;
  const int e0 = c * 8;
  float x[8], y[8];
  to_float8(load8(src + e0), src, x);
  const int p0 = e0 < half ? e0 + half : e0 - half;
  const int p1 = e0 + 4 < half ? e0 + 4 + half : e0 + 4 - half;
  const uint2 y0 = *reinterpret_cast<const uint2*>(src + p0);
  const uint2 y1 = *reinterpret_cast<const uint2*>(src + p1);
  to_float8(make_uint4(y0.x, y0.y, y1.x, y1.y), src, y);
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    const int j = e0 + 4 * g;
    const bool first = j < half;
    const float* cs = row + (first || rot == dim ? j : j - half);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float a = x[4 * g + e], b = y[4 * g + e];
      o[4 * g + e] = first ? a * cs[e] - b * cs[rot + e] : a * cs[e] + b * cs[rot + e];
    }
  }
}

template <typename In, bool FP8>
__device__ __forceinline__ void rope_cache(
    const In* __restrict__ q, const In* __restrict__ k, const In* __restrict__ v,
    In* __restrict__ q_out, In* __restrict__ k_out, In* __restrict__ zeros_out,
    void* __restrict__ key_cache, void* __restrict__ value_cache,
    const int64_t* __restrict__ positions, const int64_t* __restrict__ offsets,
    const float* __restrict__ cos_sin, int64_t max_pos, int rot,
    const int64_t* __restrict__ slot_mapping, const int64_t* __restrict__ slot_remap,
    int64_t num_remap, unsigned long long* fault, int64_t num_slots, int num_tokens,
    int num_kv_tokens, int num_q_heads, int num_kv_heads, int head_dim, int64_t q_token_stride,
    int64_t q_head_stride, int64_t k_token_stride, int64_t k_head_stride,
    int64_t v_token_stride, int64_t v_head_stride, float k_scale, float v_scale, int neox,
    int layout, int block_size_log2) {
  constexpr int X = FP8 ? 16 : 8;
  const int64_t t = blockIdx.x;
  if (t >= num_kv_tokens) return;
  const bool rotate = t < num_tokens;
  const float* row = nullptr;
  if (rotate) {
    const int64_t pos = positions[t] + (offsets != nullptr ? offsets[t] : 0);
    if (pos < 0 || pos >= max_pos) {
      if (threadIdx.x == 0) record_fault(fault, kFaultPositionBeyondTable, t, pos, max_pos);
      return;
    }
    row = cos_sin + pos * 2 * rot;
  }
  const int64_t slot = resolve_slot(t, slot_mapping, slot_remap, num_remap, num_slots, fault);
  const int half = head_dim >> 1;

  // One chunk per iteration, q heads first, then k heads. NeoX: elements
  // j0..j0+7 and j0+half..j0+half+7 (8 pairs), or with halves not of whole
  // pieces (across) elements j0..j0+7 alone; GPT-J: elements e0..e0+7 (4
  // interleaved pairs). Stores are 16 bytes.
  // The choice is made once per launch, outside the loop: one loop serving
  // both would keep the registers of both alive (96 against 56 for f16).
  auto rotate_heads = [&](auto across_tag) {
    constexpr bool across = decltype(across_tag)::value;
    const int chunks_per_head = neox && !across ? half / 8 : head_dim / 8;
    const int chunks = (num_q_heads + num_kv_heads) * chunks_per_head;
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
      const int hh = i / chunks_per_head;
      const int c = i - hh * chunks_per_head;
      const bool is_q = hh < num_q_heads;
      const int h = is_q ? hh : hh - num_q_heads;
      const In* src = is_q ? q + t * q_token_stride + h * q_head_stride : k + t * k_token_stride + h * k_head_stride;
      In* dst = is_q ? q_out + (t * num_q_heads + h) * head_dim : k_out + (t * num_kv_heads + h) * head_dim;
      float o1[8], o2[8];
      int ea, eb;  // element offsets of the pieces written (eb < 0: one piece)
      if constexpr (across) {
        rotate8_across<In>(src, row, rot, head_dim, c, o1);
        ea = c * 8;
        eb = -1;
      } else {
        rotate8<In>(src, row, rot, head_dim, neox != 0, c, o1, o2, &ea, &eb);
      }
      const uint4 va = pack8<In>(o1);
      *reinterpret_cast<uint4*>(dst + ea) = va;
      uint4 vb;
      if (eb >= 0) {
        vb = pack8<In>(o2);
        *reinterpret_cast<uint4*>(dst + eb) = vb;
      }
      if (is_q) {
        if (zeros_out != nullptr) {
          In* z = zeros_out + (t * num_q_heads + h) * head_dim;
          *reinterpret_cast<uint4*>(z + ea) = make_uint4(0u, 0u, 0u, 0u);
          if (eb >= 0) *reinterpret_cast<uint4*>(z + eb) = make_uint4(0u, 0u, 0u, 0u);
        }
      } else if (slot >= 0) {
        // The cache holds what k_out holds: the rotation rounded to <in>.
        int st;
        const int64_t ka = cache_place<X>(layout, false, slot, h, ea, num_kv_heads, head_dim, block_size_log2, &st);
        store_cache8<In, FP8>(key_cache, ka, st, va, k_scale);
        if (eb >= 0) {
          const int64_t kb = cache_place<X>(layout, false, slot, h, eb, num_kv_heads, head_dim, block_size_log2, &st);
          store_cache8<In, FP8>(key_cache, kb, st, vb, k_scale);
        }
      }
    }
  };
  if (rotate) {
    if (neox && (half & 7) != 0) {
      rotate_heads(Flag<true>{});
    } else {
      rotate_heads(Flag<false>{});
    }
  }
  const bool values = value_cache != nullptr;  // null: rope_values writes V
  if (slot < 0 || (rotate && !values)) return;
  // V (and, for KV-only tokens, K) go to the cache as given, 8 elements per
  // thread.
  const int vecs = num_kv_heads * (head_dim >> 3);
  for (int i = threadIdx.x; i < vecs; i += blockDim.x) {
    const int h = i / (head_dim >> 3);
    const int d = (i - h * (head_dim >> 3)) << 3;
    int st;
    if (values) {
      const uint4 vv = load8(v + t * v_token_stride + h * v_head_stride + d);
      const int64_t va = cache_place<X>(layout, true, slot, h, d, num_kv_heads, head_dim, block_size_log2, &st);
      store_cache8<In, FP8>(value_cache, va, st, vv, v_scale);
    }
    if (!rotate) {
      const uint4 kk = load8(k + t * k_token_stride + h * k_head_stride + d);
      const int64_t ka = cache_place<X>(layout, false, slot, h, d, num_kv_heads, head_dim, block_size_log2, &st);
      store_cache8<In, FP8>(key_cache, ka, st, kk, k_scale);
    }
  }
}

// RopeSlots is the slot source of rope_values (cache_append): token t's slot
// by resolve_slots' rules, faults not recorded (rope_cache records them),
// and -1 for a rotated token (t < num_tokens) whose position lies outside
// [0, max_pos), which rope_cache leaves unwritten too.
struct RopeSlots {
  static constexpr bool kMapped = false;
  const int64_t* slot_mapping;
  const int64_t* slot_remap;
  int64_t num_remap, num_slots;
  const int64_t* positions;
  const int64_t* offsets;  // optional
  int64_t max_pos;
  int num_tokens;

  template <int N>
  __device__ __forceinline__ void resolve(int64_t t0, int n, int64_t (&slot)[N]) const {
    resolve_slots(t0, n, slot_mapping, slot_remap, num_remap, num_slots, nullptr, slot);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int64_t t = t0 + j;
      if (slot[j] < 0 || t >= num_tokens) continue;
      const int64_t pos = positions[t] + (offsets != nullptr ? offsets[t] : 0);
      if (pos < 0 || pos >= max_pos) slot[j] = -1;
    }
  }
};

}  // namespace pkv

#define PKV_ROPE_VALUES(name, In, FP8)                                                             \
  extern "C" __global__ void __launch_bounds__(pkv::kAppendThreads) name(                        \
      const In* value, void* value_cache, const int64_t* positions, const int64_t* offsets,        \
      int64_t max_pos, const int64_t* slot_mapping, const int64_t* slot_remap, int64_t num_remap,  \
      int64_t num_slots, int num_tokens, int num_kv_tokens, int num_kv_heads, int head_dim,        \
      int64_t value_token_stride, int64_t value_head_stride, float v_scale, int layout,            \
      int block_size_log2) {                                                                       \
    const pkv::RopeSlots slots{slot_mapping, slot_remap, num_remap, num_slots, positions, offsets, \
                               max_pos, num_tokens};                                               \
    pkv::cache_append<In, FP8, pkv::kGroupTokens, false>(                                          \
        nullptr, value, nullptr, value_cache, nullptr, nullptr, nullptr, 0, 0, num_kv_tokens,      \
        num_kv_heads, head_dim, 0, 0, value_token_stride, value_head_stride, 1.0f, v_scale,        \
        layout, block_size_log2, slots);                                                           \
  }

#define PKV_ROPE_CACHE(name, In, FP8)                                                             \
  extern "C" __global__ void __launch_bounds__(128) name(                                         \
      const In* q, const In* k, const In* v, In* q_out, In* k_out, In* zeros_out,                 \
      void* key_cache, void* value_cache, const int64_t* positions, const int64_t* offsets,       \
      const float* cos_sin, int64_t max_pos, int rot, const int64_t* slot_mapping,                \
      const int64_t* slot_remap, int64_t num_remap, unsigned long long* fault, int64_t num_slots, \
      int num_tokens, int num_kv_tokens, int num_q_heads, int num_kv_heads, int head_dim,         \
      int64_t q_token_stride, int64_t q_head_stride, int64_t k_token_stride,                      \
      int64_t k_head_stride, int64_t v_token_stride, int64_t v_head_stride, float k_scale,        \
      float v_scale, int neox, int layout, int block_size_log2) {                                 \
    pkv::rope_cache<In, FP8>(q, k, v, q_out, k_out, zeros_out, key_cache, value_cache, positions, \
                             offsets, cos_sin, max_pos, rot, slot_mapping, slot_remap, num_remap, \
                             fault, num_slots, num_tokens, num_kv_tokens, num_q_heads,            \
                             num_kv_heads, head_dim, q_token_stride, q_head_stride,               \
                             k_token_stride, k_head_stride, v_token_stride, v_head_stride,        \
                             k_scale, v_scale, neox, layout, block_size_log2);                    \
  }

PKV_ROPE_CACHE(rope_cache_f16, __half, false)
PKV_ROPE_CACHE(rope_cache_bf16, __nv_bfloat16, false)
PKV_ROPE_CACHE(rope_cache_f16_e4m3, __half, true)
PKV_ROPE_CACHE(rope_cache_bf16_e4m3, __nv_bfloat16, true)

PKV_ROPE_VALUES(rope_values_f16, __half, false)
PKV_ROPE_VALUES(rope_values_bf16, __nv_bfloat16, false)
PKV_ROPE_VALUES(rope_values_f16_e4m3, __half, true)
PKV_ROPE_VALUES(rope_values_bf16_e4m3, __nv_bfloat16, true)
