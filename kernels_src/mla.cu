// mla.cu: helpers for multi-head latent attention (MLA) inputs.
//
// mla_rope_quant_<in>
//   q_nope [num_tokens, num_heads, lora] and q_rope [num_tokens, num_heads, rope]
//   of <in>; k_nope [num_tokens, num_kv_heads, lora] and k_rope
//   [num_tokens, num_kv_heads, rope] of <in>; all at element strides
//   (token, head), rows 16-byte aligned.
//   RoPE on q_rope and k_rope exactly as rope.cu (positions int64 [num_tokens],
//   cos_sin f32 [max_pos, 2·rot], rot = rope or rope/2, NeoX or GPT-J), in f32,
//   then every element is divided by its tensor's scale (q_scale for q,
//   k_scale for k) and rounded to fp8 e4m3 (nearest even, saturated):
//   q_out [num_tokens, num_heads, lora + rope] (nope first, then rotated rope),
//   k_nope_out [num_tokens, num_kv_heads, lora], k_rope_out
//   [num_tokens, num_kv_heads, rope]. A position outside the table is recorded
//   in fault (code 5) and nothing of that token is written.
// mla_concat_q_<in>
//   q_nope [num_tokens, num_heads, lora] and q_rope [num_tokens, num_heads, rope]
//   (strides as above) → out [num_tokens, num_heads, lora + rope], bit for bit.
// lora and rope are multiples of 8 (rope a multiple of 16 for NeoX). Grid:
// num_tokens blocks of 128 threads; threads move 16-byte pieces.
#include "rope.cuh"

namespace pkv {

template <typename In>
__device__ __forceinline__ void mla_rope_quant(
    const In* __restrict__ q_nope, const In* __restrict__ q_rope, const In* __restrict__ k_nope,
    const In* __restrict__ k_rope, uint8_t* __restrict__ q_out, uint8_t* __restrict__ k_nope_out,
    uint8_t* __restrict__ k_rope_out, const int64_t* __restrict__ positions,
    const float* __restrict__ cos_sin, int64_t max_pos, int rot, unsigned long long* fault,
    int num_tokens, int num_heads, int num_kv_heads, int lora, int rope, int64_t qn_token_stride,
    int64_t qn_head_stride, int64_t qr_token_stride, int64_t qr_head_stride,
    int64_t kn_token_stride, int64_t kn_head_stride, int64_t kr_token_stride,
    int64_t kr_head_stride, float q_scale, float k_scale, int neox) {
  const int64_t t = blockIdx.x;
  if (t >= num_tokens) return;
  const int64_t pos = positions[t];
  if (pos < 0 || pos >= max_pos) {
    if (threadIdx.x == 0) record_fault(fault, kFaultPositionBeyondTable, t, pos, max_pos);
    return;
  }
  const float* row = cos_sin + pos * 2 * rot;
  const int ln = lora >> 3;
  // Nope pieces: quantize as given.
  const int nope = (num_heads + num_kv_heads) * ln;
  for (int i = threadIdx.x; i < nope; i += blockDim.x) {
    const int hh = i / ln;
    const int d = (i - hh * ln) << 3;
    const bool is_q = hh < num_heads;
    const int h = is_q ? hh : hh - num_heads;
    float f[8];
    if (is_q) {
      const In* src = q_nope + t * qn_token_stride + h * qn_head_stride + d;
      to_float8(load8(src), src, f);
      *reinterpret_cast<uint2*>(q_out + (t * num_heads + h) * (lora + rope) + d) = e4m3x8(f, q_scale);
    } else {
      const In* src = k_nope + t * kn_token_stride + h * kn_head_stride + d;
      to_float8(load8(src), src, f);
      *reinterpret_cast<uint2*>(k_nope_out + (t * num_kv_heads + h) * lora + d) = e4m3x8(f, k_scale);
    }
  }
  // Rope pieces: rotate, then quantize.
  const int cph = neox ? (rope >> 1) / 8 : rope / 8;
  const int pieces = (num_heads + num_kv_heads) * cph;
  for (int i = threadIdx.x; i < pieces; i += blockDim.x) {
    const int hh = i / cph;
    const int c = i - hh * cph;
    const bool is_q = hh < num_heads;
    const int h = is_q ? hh : hh - num_heads;
    const In* src = is_q ? q_rope + t * qr_token_stride + h * qr_head_stride : k_rope + t * kr_token_stride + h * kr_head_stride;
    uint8_t* dst = is_q ? q_out + (t * num_heads + h) * (lora + rope) + lora : k_rope_out + (t * num_kv_heads + h) * rope;
    const float scale = is_q ? q_scale : k_scale;
    float o1[8], o2[8];
    int ea, eb;
    rotate8<In>(src, row, rot, rope, neox != 0, c, o1, o2, &ea, &eb);
    *reinterpret_cast<uint2*>(dst + ea) = e4m3x8(o1, scale);
    if (eb >= 0) *reinterpret_cast<uint2*>(dst + eb) = e4m3x8(o2, scale);
  }
}

template <typename In>
__device__ __forceinline__ void mla_concat_q(const In* __restrict__ q_nope, const In* __restrict__ q_rope,
                                             In* __restrict__ out, int num_tokens, int num_heads,
                                             int lora, int rope, int64_t qn_token_stride,
                                             int64_t qn_head_stride, int64_t qr_token_stride,
                                             int64_t qr_head_stride) {
  const int64_t t = blockIdx.x;
  if (t >= num_tokens) return;
  const int per_head = (lora + rope) >> 3;
  for (int i = threadIdx.x; i < num_heads * per_head; i += blockDim.x) {
    const int h = i / per_head;
    const int d = (i - h * per_head) << 3;
    const In* src = d < lora ? q_nope + t * qn_token_stride + h * qn_head_stride + d
                             : q_rope + t * qr_token_stride + h * qr_head_stride + (d - lora);
    *reinterpret_cast<uint4*>(out + (t * num_heads + h) * (lora + rope) + d) = load8(src);
  }
}

}  // namespace pkv

#define PKV_MLA(in_name, In)                                                                      \
  extern "C" __global__ void __launch_bounds__(128) mla_rope_quant_##in_name(                     \
      const In* q_nope, const In* q_rope, const In* k_nope, const In* k_rope, uint8_t* q_out,     \
      uint8_t* k_nope_out, uint8_t* k_rope_out, const int64_t* positions, const float* cos_sin,   \
      int64_t max_pos, int rot, unsigned long long* fault, int num_tokens, int num_heads,         \
      int num_kv_heads, int lora, int rope, int64_t qn_token_stride, int64_t qn_head_stride,      \
      int64_t qr_token_stride, int64_t qr_head_stride, int64_t kn_token_stride,                   \
      int64_t kn_head_stride, int64_t kr_token_stride, int64_t kr_head_stride, float q_scale,     \
      float k_scale, int neox) {                                                                  \
    pkv::mla_rope_quant<In>(q_nope, q_rope, k_nope, k_rope, q_out, k_nope_out, k_rope_out,        \
                            positions, cos_sin, max_pos, rot, fault, num_tokens, num_heads,       \
                            num_kv_heads, lora, rope, qn_token_stride, qn_head_stride,            \
                            qr_token_stride, qr_head_stride, kn_token_stride, kn_head_stride,     \
                            kr_token_stride, kr_head_stride, q_scale, k_scale, neox);             \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(128) mla_concat_q_##in_name(                       \
      const In* q_nope, const In* q_rope, In* out, int num_tokens, int num_heads, int lora,       \
      int rope, int64_t qn_token_stride, int64_t qn_head_stride, int64_t qr_token_stride,         \
      int64_t qr_head_stride) {                                                                   \
    pkv::mla_concat_q<In>(q_nope, q_rope, out, num_tokens, num_heads, lora, rope,                 \
                          qn_token_stride, qn_head_stride, qr_token_stride, qr_head_stride);      \
  }

PKV_MLA(f16, __half)
PKV_MLA(bf16, __nv_bfloat16)
