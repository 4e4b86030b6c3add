// Scalar block decoders, one per encoding, following docs/quant.md line by line.
#include "core/quant.h"

#include <cmath>

#include "core/errors.h"

namespace cyb {

const int8_t kIq4nlTable[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                1,    13,   25,  38,  53,  69,  89,  113};

float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) return sign;  // < 2^-25 rounds to zero
    const uint32_t e = abs >> 23;
    const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) ... value = man * 2^(e-150); half step 2^-24
    // half subnormal units: value / 2^-24 = man * 2^(e - 126)
    const uint32_t sh = shift;  // man >> sh gives the integer part
    uint32_t q = man >> sh;
    const uint32_t rem = man & ((1u << sh) - 1);
    const uint32_t halfway = 1u << (sh - 1);
    if (rem > halfway || (rem == halfway && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // normal: rebias exponent, round mantissa to 10 bits (nearest even); carries propagate into exp
  uint32_t v = abs - (static_cast<uint32_t>(127 - 15) << 23);
  const uint32_t rem = v & 0x1fffu;
  v >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (v & 1))) ++v;
  return static_cast<uint16_t>(sign | v);
}

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

namespace {

inline float rd_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}

void dq_q4_0(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 15) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

void dq_q4_1(const uint8_t* b, float* y) {
  const float d = rd_f16(b), m = rd_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 15) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

void dq_q5_0(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 15) | static_cast<int>((qh >> j) & 1) << 4;
    const int hi = (qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4;
    y[j] = d * static_cast<float>(lo - 16);
    y[j + 16] = d * static_cast<float>(hi - 16);
  }
}

void dq_q5_1(const uint8_t* b, float* y) {
  const float d = rd_f16(b), m = rd_f16(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 15) | static_cast<int>((qh >> j) & 1) << 4;
    const int hi = (qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4;
    y[j] = d * static_cast<float>(lo) + m;
    y[j + 16] = d * static_cast<float>(hi) + m;
  }
}

void dq_q8_0(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(qs[j]);
}

void dq_iq4_nl(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4nlTable[qs[j] & 15]);
    y[j + 16] = d * static_cast<float>(kIq4nlTable[qs[j] >> 4]);
  }
}

// 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block.
inline void k_scale_min(int j, const uint8_t* sc, int* s, int* m) {
  if (j < 4) {
    *s = sc[j] & 63;
    *m = sc[j + 4] & 63;
  } else {
    *s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
    *m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}

void dq_q4_k(const uint8_t* b, float* y) {
  const float d = rd_f16(b), dmin = rd_f16(b + 2);
  const uint8_t* sc = b + 4;
  const uint8_t* qs = b + 16;
  for (int p = 0; p < 4; ++p) {
    int s0, m0, s1, m1;
    k_scale_min(2 * p, sc, &s0, &m0);
    k_scale_min(2 * p + 1, sc, &s1, &m1);
    const float d0 = d * static_cast<float>(s0), dm0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(s1), dm1 = dmin * static_cast<float>(m1);
    for (int l = 0; l < 32; ++l) {
      y[64 * p + l] = d0 * static_cast<float>(qs[32 * p + l] & 15) - dm0;
      y[64 * p + 32 + l] = d1 * static_cast<float>(qs[32 * p + l] >> 4) - dm1;
    }
  }
}

void dq_q5_k(const uint8_t* b, float* y) {
  const float d = rd_f16(b), dmin = rd_f16(b + 2);
  const uint8_t* sc = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int p = 0; p < 4; ++p) {
    int s0, m0, s1, m1;
    k_scale_min(2 * p, sc, &s0, &m0);
    k_scale_min(2 * p + 1, sc, &s1, &m1);
    const float d0 = d * static_cast<float>(s0), dm0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(s1), dm1 = dmin * static_cast<float>(m1);
    for (int l = 0; l < 32; ++l) {
      const int lo = (qs[32 * p + l] & 15) | ((qh[l] >> (2 * p)) & 1) << 4;
      const int hi = (qs[32 * p + l] >> 4) | ((qh[l] >> (2 * p + 1)) & 1) << 4;
      y[64 * p + l] = d0 * static_cast<float>(lo) - dm0;
      y[64 * p + 32 + l] = d1 * static_cast<float>(hi) - dm1;
    }
  }
}

void dq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = rd_f16(b + 208);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* L = ql + 64 * h;
    const uint8_t* H = qh + 32 * h;
    const int8_t* S = sc + 8 * h;
    float* o = y + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((L[l] & 15) | ((H[l] >> 0) & 3) << 4) - 32;
      const int q2 = ((L[l + 32] & 15) | ((H[l] >> 2) & 3) << 4) - 32;
      const int q3 = ((L[l] >> 4) | ((H[l] >> 4) & 3) << 4) - 32;
      const int q4 = ((L[l + 32] >> 4) | ((H[l] >> 6) & 3) << 4) - 32;
      o[l] = (d * static_cast<float>(S[is])) * static_cast<float>(q1);
      o[l + 32] = (d * static_cast<float>(S[is + 2])) * static_cast<float>(q2);
      o[l + 64] = (d * static_cast<float>(S[is + 4])) * static_cast<float>(q3);
      o[l + 96] = (d * static_cast<float>(S[is + 6])) * static_cast<float>(q4);
    }
  }
}

void dq_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = rd_f16(b + 108);
  int scale[16];
  for (int i = 0; i < 16; ++i) {
    const int lo4 = i < 8 ? (sc[i] & 15) : (sc[i - 8] >> 4);
    const int hi2 = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
    scale[i] = (lo4 | hi2 << 4) - 32;
  }
  for (int h = 0; h < 2; ++h) {
    const uint8_t* q = qs + 32 * h;
    for (int j = 0; j < 4; ++j) {
      const int bit = 4 * h + j;
      const float d0 = d * static_cast<float>(scale[8 * h + 2 * j]);
      const float d1 = d * static_cast<float>(scale[8 * h + 2 * j + 1]);
      for (int l = 0; l < 16; ++l) {
        const int v0 = ((q[l] >> (2 * j)) & 3) - (((hmask[l] >> bit) & 1) ? 0 : 4);
        const int v1 = ((q[l + 16] >> (2 * j)) & 3) - (((hmask[l + 16] >> bit) & 1) ? 0 : 4);
        y[128 * h + 32 * j + l] = d0 * static_cast<float>(v0);
        y[128 * h + 32 * j + 16 + l] = d1 * static_cast<float>(v1);
      }
    }
  }
}

void dq_q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + 16;
  const float d = rd_f16(b + 80), dmin = rd_f16(b + 82);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* q = qs + 32 * h;
    for (int j = 0; j < 4; ++j) {
      const uint8_t s0 = sc[8 * h + 2 * j], s1 = sc[8 * h + 2 * j + 1];
      const float dl0 = d * static_cast<float>(s0 & 15), ml0 = dmin * static_cast<float>(s0 >> 4);
      const float dl1 = d * static_cast<float>(s1 & 15), ml1 = dmin * static_cast<float>(s1 >> 4);
      for (int l = 0; l < 16; ++l) {
        y[128 * h + 32 * j + l] = dl0 * static_cast<float>((q[l] >> (2 * j)) & 3) - ml0;
        y[128 * h + 32 * j + 16 + l] = dl1 * static_cast<float>((q[l + 16] >> (2 * j)) & 3) - ml1;
      }
    }
  }
}

}  // namespace

void dequant_block(DType t, const void* blk, float* out) {
  const uint8_t* b = static_cast<const uint8_t*>(blk);
  switch (t) {
    case DType::F32: std::memcpy(out, b, 4); return;
    case DType::F16: { uint16_t h; std::memcpy(&h, b, 2); *out = fp16_to_f32(h); return; }
    case DType::BF16: { uint16_t h; std::memcpy(&h, b, 2); *out = bf16_to_f32(h); return; }
    case DType::Q4_0: dq_q4_0(b, out); return;
    case DType::Q4_1: dq_q4_1(b, out); return;
    case DType::Q5_0: dq_q5_0(b, out); return;
    case DType::Q5_1: dq_q5_1(b, out); return;
    case DType::Q8_0: dq_q8_0(b, out); return;
    case DType::Q2_K: dq_q2_k(b, out); return;
    case DType::Q3_K: dq_q3_k(b, out); return;
    case DType::Q4_K: dq_q4_k(b, out); return;
    case DType::Q5_K: dq_q5_k(b, out); return;
    case DType::Q6_K: dq_q6_k(b, out); return;
    case DType::IQ4_NL: dq_iq4_nl(b, out); return;
    default: break;
  }
  throw_unsupported_op("dequantize", "cpu", dtype_name(t));
}

void dequant_row(DType t, const void* row, float* out, int64_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(row);
  if (t == DType::F32) {
    std::memcpy(out, b, static_cast<size_t>(n) * 4);
    return;
  }
  const int64_t bs = block_size(t), bb = block_bytes(t);
  for (int64_t i = 0; i < n / bs; ++i) dequant_block(t, b + i * bb, out + i * bs);
}

}  // namespace cyb
