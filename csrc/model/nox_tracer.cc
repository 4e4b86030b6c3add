#include "model/nox_tracer.h"

namespace cyb {

void NoxTracer::begin(int64_t pos0, int64_t T) {
  Sha256 h;
  const char tag[] = "cyb-nox/1";
  h.update(tag, sizeof tag - 1);
  h.update_u64le(static_cast<uint64_t>(pos0));
  h.update_u64le(static_cast<uint64_t>(T));
  chain_ = h.finish();
  nodes_ = 0;
}

void NoxTracer::on_node(const graph::Node& n, const Tensor* in, int n_in, const Tensor* out, int n_out,
                        const char* in_is_state, const char* out_is_state,
                        int64_t visible) {
  Sha256 h;
  h.update(chain_.data(), chain_.size());
  h.update_u16le(static_cast<uint16_t>(n.kind));
  h.update_u8(static_cast<uint8_t>(n_in));
  for (int i = 0; i < n_in; ++i) {
    Sha256::Digest d;
    if (in_is_state[i]) d = nox_tensor_digest(in[i], visible);
    else if (in[i].name && weights_) d = weights_->get(in[i]);  // weights are named and immutable
    else d = nox_tensor_digest(in[i]);
    h.update(d.data(), d.size());
  }
  h.update_u8(static_cast<uint8_t>(n_out));
  for (int i = 0; i < n_out; ++i) {
    const Sha256::Digest d = nox_tensor_digest(out[i], out_is_state[i] ? visible : -1);
    h.update(d.data(), d.size());
  }
  chain_ = h.finish();
  ++nodes_;
}

}  // namespace cyb
