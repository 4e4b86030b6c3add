#include "dispatch/op.h"

namespace cyb {

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::Embedding: return "embedding";
    case OpKind::Matmul: return "matmul";
    case OpKind::RmsNorm: return "rms_norm";
    case OpKind::LayerNorm: return "layer_norm";
    case OpKind::Rope: return "rope";
    case OpKind::Attention: return "attention";
    case OpKind::Softmax: return "softmax";
    case OpKind::Add: return "add";
    case OpKind::Mul: return "mul";
    case OpKind::Scale: return "scale";
    case OpKind::Silu: return "silu";
    case OpKind::Gelu: return "gelu";
    case OpKind::GeluTanh: return "gelu_tanh";
    case OpKind::SwiGlu: return "swiglu";
    case OpKind::GeGlu: return "geglu";
    case OpKind::Softcap: return "softcap";
    case OpKind::FusedSkipNorm: return "fused_skip_norm";
    case OpKind::FusedNormMatmul: return "fused_norm_matmul";
    case OpKind::FusedSwiGlu: return "fused_swiglu";
    case OpKind::KvWrite: return "kv_write";
    case OpKind::Copy: return "copy";
    case OpKind::Reshape: return "reshape";
    case OpKind::LastRows: return "last_rows";
    case OpKind::COUNT_PLUS_ONE: break;
  }
  return "unknown";
}

bool parse_op_name(const char* s, OpKind* out) {
  if (!s) return false;
  for (int i = 1; i < static_cast<int>(OpKind::COUNT_PLUS_ONE); ++i) {
    const char* n = op_name(static_cast<OpKind>(i));
    const char* a = s;
    while (*a && *a == *n) ++a, ++n;
    if (*a == 0 && *n == 0) {
      *out = static_cast<OpKind>(i);
      return true;
    }
  }
  return false;
}

}  // namespace cyb
