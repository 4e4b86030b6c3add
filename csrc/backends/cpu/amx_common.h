// Helpers shared by the AMX kernel files (*_amx.cc only: include it from
// translation units compiled with the AMX flags): the tile configuration.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace cyb {
namespace cpu {
namespace amx {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// GCC does not model ldtilecfg as reading its operand and drops the stores that
// fill the configuration; an empty asm that "reads" memory keeps them.
inline void tile_config_barrier(const void* p) {
#if defined(__GNUC__)
  __asm__ volatile("" : : "r"(p) : "memory");
#else
  (void)p;
#endif
}

// Tiles 0..n-1 of the calling thread: 16 rows x 64 bytes each.
inline void load_full_tiles(int n) {
  TileConfig c;
  for (int i = 0; i < n; ++i) {
    c.rows[i] = 16;
    c.colsb[i] = 64;
  }
  tile_config_barrier(&c);
  _tile_loadconfig(&c);
}

}  // namespace amx
}  // namespace cpu
}  // namespace cyb
