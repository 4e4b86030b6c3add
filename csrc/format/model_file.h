// The `.model` container reader (docs/format.md): bounded marker scan, section
// split, TOML sections, read-only mmap of the weights, validation of every
// tensor of the index.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "format/toml.h"

namespace cyb {

struct TensorEntry {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  uint64_t offset = 0;  // from the first weights byte
  uint64_t size = 0;
};

class ModelFile {
 public:
  // Opens, maps and validates; throws cyb::Error (Format, WeightFormatMismatch) on bad input.
  static std::shared_ptr<ModelFile> open(const std::string& path);
  // Same checks on bytes already in memory (copied); `name` stands for the path.
  static std::shared_ptr<ModelFile> from_memory(const void* data, size_t size,
                                                const std::string& name = "<memory>");
  ~ModelFile();
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;

  const std::string& path() const { return path_; }
  // Section names in file order (without "weights").
  const std::vector<std::string>& section_names() const { return section_order_; }
  bool has_section(const std::string& name) const;
  // Section text with the `\~~~` escapes undone; throws Format if absent.
  const std::string& section_text(const std::string& name) const;
  // Parsed TOML sections (frontmatter, config); cached.
  const toml::Value& frontmatter() const { return frontmatter_; }
  const toml::Value& config() const { return config_; }
  // Parses a TOML section on demand (vocab, chat, graph, eval, ...); not cached.
  toml::Value section_toml(const std::string& name) const;

  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* find(const std::string& name) const;
  const uint8_t* weights() const { return weights_.load(std::memory_order_acquire); }
  uint64_t weights_size() const { return weights_size_; }
  uint64_t weights_offset() const { return weights_offset_; }  // file offset of the first weights byte
  uint64_t file_size() const { return map_size_; }
  // Files up to kReadThreshold bytes are read into memory at open (changes on
  // disk cannot reach them); larger ones are mapped read-only.
  static constexpr uint64_t kReadThreshold = 64ull << 20;
  bool in_memory() const { return map_ == nullptr; }
  // A mapped file: FormatError naming it when it changed on disk since open
  // (size, inode, device or modification time of the descriptor kept open;
  // a truncated mapping would fault on access). Nothing for in-memory files.
  void check_unchanged() const;
  const uint8_t* tensor_data(const TensorEntry& e) const { return weights() + e.offset; }
  // Whether the weights are read through the file's mapping (a large file, not copied into huge
  // pages): bytes there fault (SIGBUS) once the file is truncated under them.
  bool weights_in_mapping() const;
  // Copies the tensor's e.size bytes into dst, safely whatever happens to the file: from a mapped
  // file, check_unchanged() then pread from the descriptor (FormatError naming the file when it
  // changed or came up short); otherwise from the process's own bytes. (Python's tensor views of a
  // mapped file are such copies: docs/errors.md, "The file changes on disk".)
  void read_tensor(const TensorEntry& e, uint8_t* dst) const;
  // Linux, a mapped file: copies the weights into anonymous memory backed by transparent huge
  // pages (2 MiB pages: a decode streams every weight, and with 4 KiB pages of a mapping each
  // 4 KiB costs a TLB miss and page walk: qwen15 decode ~10% faster, docs/runtime.md "Weights in
  // memory"), read-only, read from the open descriptor (the file's weight pages are not faulted
  // into this process: they stay in the page cache only). Only where the kernel offers
  // transparent huge pages ("always" or "madvise"), CYB_HUGE_PAGES is not 0, and the weights
  // take at most half of the available memory; otherwise the mapping stays. Tensor views taken before keep pointing into the
  // mapping, which stays valid; the on-disk check (check_unchanged) is unchanged. Returns whether
  // the weights are in huge pages. Thread-safe; Model::load calls it after its memory check.
  bool use_huge_pages();
  // Hands back the resident pages of a weight's bytes [p, p + bytes) once a kernel keeps its own
  // copy of them (core/weight_cache.h: a packed copy): the whole pages inside the range leave this
  // process's resident set and fault in again from the file if ever read (the same bytes). In the
  // read-only mapping: madvise(MADV_DONTNEED). In the huge-page copy (Linux): the pages are
  // replaced by a read-only private mapping of the same file bytes (mmap MAP_FIXED; the copy is
  // laid out page-congruent with the file for this), after which the weights count as read
  // through the mapping (weights_in_mapping). Returns the bytes handed back: 0 for a range outside
  // the weights, bytes read into memory at open (a small file), or where the platform has no such
  // call (Windows). Thread-safe.
  size_t release_pages(const void* p, size_t bytes);
  // The mapped tensor as a Tensor (host view, named after the entry): the one
  // TensorEntry -> Tensor conversion of the tree.
  Tensor tensor(const TensorEntry& e) const {
    Tensor t;
    t.dtype = e.dtype;
    for (int64_t d : e.shape) t.shape.d[t.shape.ndim++] = d;
    t.data = const_cast<uint8_t*>(tensor_data(e));
    t.name = e.name.c_str();
    return t;
  }

 private:
  ModelFile() = default;
  void load(const uint8_t* data, uint64_t size);  // parses and validates a whole file image
  std::string path_;
  std::vector<std::string> section_order_;
  std::unordered_map<std::string, std::string> sections_;
  toml::Value frontmatter_;
  toml::Value config_;
  std::vector<TensorEntry> tensors_;
  std::unordered_map<std::string, size_t> index_;
  void* map_ = nullptr;
  uint64_t map_size_ = 0;
#ifdef _WIN32
  void* map_handle_ = nullptr;  // the file-mapping object
#endif
  // from_memory and small files: the bytes, 64-byte aligned as a mapping is (tensor offsets are
  // multiples of 64, so every tensor view stays aligned for the SIMD kernels)
  struct alignas(64) Line {
    uint8_t b[64];
  };
  std::vector<Line> owned_;
  uint8_t* own(size_t n) {
    owned_.resize((n + 63) / 64);
    return owned_.data()->b;
  }
#ifndef _WIN32
  int fd_ = -1;  // a mapped file's descriptor and what fstat said at open
  uint64_t st_dev_ = 0, st_ino_ = 0, st_size_ = 0;
  int64_t st_mtime_s_ = 0, st_mtime_ns_ = 0;
#endif
  std::atomic<const uint8_t*> weights_{nullptr};  // into the mapping / owned bytes, or huge_
  void* huge_ = nullptr;  // use_huge_pages(): the copy, huge_size_ bytes (a multiple of 2 MiB)
  size_t huge_size_ = 0;
  size_t huge_lead_ = 0;  // the weights start huge_lead_ bytes into huge_ (weights_offset_ modulo the page size)
  std::atomic<bool> huge_released_{false};  // release_pages mapped file pages into the huge copy
  std::mutex huge_mu_;
  uint64_t weights_size_ = 0;
  uint64_t weights_offset_ = 0;
};

}  // namespace cyb
