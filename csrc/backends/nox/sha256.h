// SHA-256 (FIPS 180-4), written for the nox digest chain.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cyb {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;
  Sha256() { reset(); }
  void reset();
  void update(const void* data, size_t n);
  void update_u8(uint8_t v) { update(&v, 1); }
  void update_u16le(uint16_t v);
  void update_u64le(uint64_t v);
  Digest finish();  // the object must be reset() before reuse
  static Digest of(const void* data, size_t n);
  static std::string hex(const Digest& d);

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

}  // namespace cyb
