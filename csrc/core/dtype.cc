#include "core/dtype.h"

namespace cyb {

namespace {
const DTypeInfo kInfo[] = {
    {"f32", "F32", 1, 4, false},      {"f16", "F16", 1, 2, false},
    {"bf16", "BF16", 1, 2, false},    {"q4_0", "Q4_0", 32, 18, true},
    {"q4_1", "Q4_1", 32, 20, true},   {"q5_0", "Q5_0", 32, 22, true},
    {"q5_1", "Q5_1", 32, 24, true},   {"q8_0", "Q8_0", 32, 34, true},
    {"q2_k", "Q2_K", 256, 84, true},  {"q3_k", "Q3_K", 256, 110, true},
    {"q4_k", "Q4_K", 256, 144, true}, {"q5_k", "Q5_K", 256, 176, true},
    {"q6_k", "Q6_K", 256, 210, true}, {"iq4_nl", "IQ4_NL", 32, 18, true},
    {"i32", "I32", 1, 4, false},      {"i64", "I64", 1, 8, false},
    {"u8", "U8", 1, 1, false},        {"i8", "I8", 1, 1, false},
    {"bool", "BOOL", 1, 1, false},
};
static_assert(sizeof(kInfo) / sizeof(kInfo[0]) == static_cast<size_t>(DType::COUNT),
              "dtype table out of sync");

const EncodingAlias kAliases[] = {
    {"u32", DType::F32},    {"u16", DType::F16},    {"q4", DType::Q4_0},
    {"q8", DType::Q8_0},    {"q2k", DType::Q2_K},   {"q3k", DType::Q3_K},
    {"q4k", DType::Q4_K},   {"q5k", DType::Q5_K},   {"q6k", DType::Q6_K},
    {"iq4nl", DType::IQ4_NL},
};
}  // namespace

const DTypeInfo& dtype_info(DType t) { return kInfo[static_cast<size_t>(t)]; }

const EncodingAlias* encoding_aliases(size_t* count) {
  *count = sizeof(kAliases) / sizeof(kAliases[0]);
  return kAliases;
}

bool parse_encoding(std::string_view s, DType* out) {
  for (size_t i = 0; i < static_cast<size_t>(DType::COUNT); ++i) {
    if (s == kInfo[i].encoding) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  for (const EncodingAlias& a : kAliases) {
    if (s == a.name) {
      *out = a.t;
      return true;
    }
  }
  return false;
}

}  // namespace cyb
