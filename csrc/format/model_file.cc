// The `.model` container reader (docs/format.md sections 1 and 3).
//
// open(): map the file read-only, find the `~~~weights\n` marker within the
// first 256 MiB, split the text head into sections, parse the frontmatter,
// config and tensor index, and validate every tensor against the weights.
// Every failure is a cyb::Error: Format for the container, the TOML and the
// ranges; WeightFormatMismatch where a tensor's bytes disagree with its
// shape and encoding.
#include "format/model_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string_view>

#include "core/env_setting.h"
#include "core/errors.h"
#include "core/memory_budget.h"

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace cyb {

namespace {

constexpr uint64_t kMaxHead = 256ull << 20;  // bound of the text head (docs/format.md section 1)
constexpr std::string_view kMarker = "~~~weights\n";

#ifndef _WIN32
size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}
#endif
constexpr size_t kMaxDims = 16;

bool valid_section_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// `\~~~...`, `\\~~~...`: content lines that writers escaped (one backslash added).
bool is_escaped_fence(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && line[i] == '\\') ++i;
  return i > 0 && line.substr(i, 3) == "~~~";
}

// a * b, false on overflow.
bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

const toml::Value& require(const toml::Value& table, const std::string& section, const std::string& owner,
                           const char* key) {
  const toml::Value* v = table.find(key);
  if (!v) throw_format(section, owner, std::string("missing key '") + key + "'");
  return *v;
}

uint64_t non_negative(const toml::Value& v, const std::string& section, const std::string& owner,
                      const char* key) {
  if (!v.is_int()) throw_format(section, owner, std::string("'") + key + "' must be an integer");
  if (v.as_int() < 0) throw_format(section, owner, std::string("'") + key + "' must not be negative");
  return static_cast<uint64_t>(v.as_int());
}

#ifdef _WIN32
std::wstring widen(const std::string& s) {
  if (s.empty()) return std::wstring();
  int n = MultiByteToWideChar(CP_UTF8, 0, s.data(), static_cast<int>(s.size()), nullptr, 0);
  std::wstring w(static_cast<size_t>(n > 0 ? n : 0), L'\0');
  if (n > 0) MultiByteToWideChar(CP_UTF8, 0, s.data(), static_cast<int>(s.size()), &w[0], n);
  return w;
}
#endif

}  // namespace

std::shared_ptr<ModelFile> ModelFile::open(const std::string& path) {
  std::shared_ptr<ModelFile> mf(new ModelFile());
  mf->path_ = path;
  auto fail_open = [&](const std::string& why) { throw_format("", "", "cannot open '" + path + "': " + why); };
#ifdef _WIN32
  HANDLE file = CreateFileW(widen(path).c_str(), GENERIC_READ, FILE_SHARE_READ, nullptr, OPEN_EXISTING,
                            FILE_ATTRIBUTE_NORMAL, nullptr);
  if (file == INVALID_HANDLE_VALUE) fail_open("error " + std::to_string(GetLastError()));
  if (GetFileType(file) != FILE_TYPE_DISK) {  // pipes, consoles, devices
    CloseHandle(file);
    fail_open("not a regular file");
  }
  LARGE_INTEGER size;
  if (!GetFileSizeEx(file, &size)) {
    CloseHandle(file);
    fail_open("cannot read its size");
  }
  if (size.QuadPart == 0) {
    CloseHandle(file);
    throw_format("", "", "empty file");
  }
  if (static_cast<uint64_t>(size.QuadPart) > std::numeric_limits<size_t>::max()) {
    CloseHandle(file);
    fail_open("too large to map");
  }
  HANDLE mapping = CreateFileMappingW(file, nullptr, PAGE_READONLY, 0, 0, nullptr);
  CloseHandle(file);
  if (!mapping) fail_open("CreateFileMapping failed: error " + std::to_string(GetLastError()));
  void* base = MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0);
  if (!base) {
    CloseHandle(mapping);
    fail_open("MapViewOfFile failed: error " + std::to_string(GetLastError()));
  }
  mf->map_handle_ = mapping;
  mf->map_ = base;
  mf->map_size_ = static_cast<uint64_t>(size.QuadPart);
#else
  // O_NONBLOCK: opening a FIFO (or a device) must not block waiting for a writer;
  // anything but a regular file is rejected right after (it has no effect on
  // reads and maps of a regular file).
  int flags = O_RDONLY | O_NONBLOCK;
#ifdef O_CLOEXEC
  flags |= O_CLOEXEC;
#endif
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) fail_open(std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail_open(std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail_open("not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    throw_format("", "", "empty file");
  }
  if (static_cast<uint64_t>(st.st_size) > std::numeric_limits<size_t>::max()) {
    ::close(fd);
    fail_open("too large to map");
  }
  const uint64_t fsize = static_cast<uint64_t>(st.st_size);
  if (fsize <= kReadThreshold) {
    // Small files are read: a truncation or rewrite on disk cannot reach them.
    uint8_t* dst = mf->own(static_cast<size_t>(fsize));
    uint64_t got = 0;
    while (got < fsize) {
      const ssize_t r = ::read(fd, dst + got, static_cast<size_t>(fsize - got));
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (r <= 0) {
        const int e = r < 0 ? errno : 0;
        ::close(fd);
        fail_open(e ? std::string("read failed: ") + std::strerror(e) : "the file shrank while it was read");
      }
      got += static_cast<uint64_t>(r);
    }
    ::close(fd);
    mf->map_size_ = fsize;
    mf->load(dst, fsize);
    return mf;
  }
  void* base = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  if (base == MAP_FAILED) {
    ::close(fd);
    fail_open(std::string("mmap failed: ") + std::strerror(e));
  }
  mf->map_ = base;
  mf->map_size_ = fsize;
  mf->fd_ = fd;  // kept for check_unchanged()
  mf->st_dev_ = static_cast<uint64_t>(st.st_dev);
  mf->st_ino_ = static_cast<uint64_t>(st.st_ino);
  mf->st_size_ = fsize;
#if defined(__APPLE__)
  mf->st_mtime_s_ = static_cast<int64_t>(st.st_mtimespec.tv_sec);
  mf->st_mtime_ns_ = static_cast<int64_t>(st.st_mtimespec.tv_nsec);
#else
  mf->st_mtime_s_ = static_cast<int64_t>(st.st_mtim.tv_sec);
  mf->st_mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_nsec);
#endif
#endif
  mf->load(static_cast<const uint8_t*>(mf->map_), mf->map_size_);
  return mf;
}

std::shared_ptr<ModelFile> ModelFile::from_memory(const void* data, size_t size, const std::string& name) {
  std::shared_ptr<ModelFile> mf(new ModelFile());
  mf->path_ = name;
  if (size == 0) throw_format("", "", "empty file");
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint8_t* dst = mf->own(size);
  std::memcpy(dst, bytes, size);
  mf->map_size_ = size;
  mf->load(dst, size);
  return mf;
}

ModelFile::~ModelFile() {
#ifndef _WIN32
  if (fd_ >= 0) ::close(fd_);
  if (huge_) munmap(huge_, huge_size_);
#endif
  if (!map_) return;
#ifdef _WIN32
  UnmapViewOfFile(map_);
  if (map_handle_) CloseHandle(static_cast<HANDLE>(map_handle_));
#else
  munmap(map_, static_cast<size_t>(map_size_));
#endif
}

namespace {
// CYB_HUGE_PAGES=0|1 (read once; anything else is InvalidConfig) and the kernel's transparent
// huge page mode: "always" or "madvise" (a region asks with madvise), not "never".
bool huge_pages_wanted() {
  static const bool want = [] {
    if (!env_switch("CYB_HUGE_PAGES", "1", "0", true)) return false;
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string mode;
    std::getline(f, mode);
    return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
  }();
  return want;
}
}  // namespace

bool ModelFile::use_huge_pages() {
  const bool want = huge_pages_wanted();  // (an invalid CYB_HUGE_PAGES is an error on every platform)
#if defined(__linux__)
  std::lock_guard<std::mutex> lk(huge_mu_);
  if (huge_) return true;
  if (!map_ || weights_size_ == 0 || !want) return false;
  const int64_t avail = available_memory_bytes();
  if (avail >= 0 && weights_size_ > static_cast<uint64_t>(avail) / 2) return false;
  constexpr size_t kHuge = size_t{2} << 20;
  // the weights start at the same offset within a page as in the file, so that release_pages can
  // map the file's pages over the copy's
  const size_t lead = static_cast<size_t>(weights_offset_ % static_cast<uint64_t>(page_size()));
  const size_t n = (lead + static_cast<size_t>(weights_size_) + kHuge - 1) & ~(kHuge - 1);
  void* raw = mmap(nullptr, n + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return false;
  // 2 MiB aligned (a huge page maps only an aligned 2 MiB), the rest unmapped again
  uint8_t* r = static_cast<uint8_t*>(raw);
  uint8_t* a = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(r) + kHuge - 1) & ~uintptr_t{kHuge - 1});
  if (a > r) munmap(r, static_cast<size_t>(a - r));
  if (a + n < r + n + kHuge) munmap(a + n, static_cast<size_t>(r + n + kHuge - (a + n)));
  madvise(a, n, MADV_HUGEPAGE);
  // read from the descriptor in large requests (faster from a cold page cache than faulting the
  // mapping in 4 KiB pages, and the file pages never enter this process's resident set)
  uint64_t got = 0;
  while (got < weights_size_) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(weights_size_ - got, uint64_t{64} << 20));
    const ssize_t r = ::pread(fd_, a + lead + got, want, static_cast<off_t>(weights_offset_ + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<uint64_t>(r);
  }
  // the bytes must be the ones open() validated: a short read or a file changed since, and the
  // mapping stays (the next forward's check_unchanged reports a change)
  bool same = got == weights_size_;
  if (same) {
    struct stat st;
    same = fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) == st_size_ &&
           static_cast<uint64_t>(st.st_ino) == st_ino_ && static_cast<int64_t>(st.st_mtim.tv_sec) == st_mtime_s_ &&
           static_cast<int64_t>(st.st_mtim.tv_nsec) == st_mtime_ns_;
  }
  if (!same) {
    munmap(a, n);
    return false;
  }
  mprotect(a, n, PROT_READ);
  huge_ = a;
  huge_size_ = n;
  huge_lead_ = lead;
  weights_.store(a + lead, std::memory_order_release);
  return true;
#else
  (void)want;
  return false;
#endif
}

bool ModelFile::weights_in_mapping() const {
  if (huge_released_.load(std::memory_order_acquire)) return true;  // file pages mapped into the copy
  const uint8_t* w = weights();
  const uint8_t* m = static_cast<const uint8_t*>(map_);
  return m != nullptr && w >= m && w < m + map_size_;
}

size_t ModelFile::release_pages(const void* p, size_t bytes) {
#ifdef _WIN32
  (void)p;
  (void)bytes;
  return 0;
#else
  const uintptr_t pg = static_cast<uintptr_t>(page_size());
  const uintptr_t b = reinterpret_cast<uintptr_t>(p), lo = (b + pg - 1) & ~(pg - 1), hi = (b + bytes) & ~(pg - 1);
  if (hi <= lo) return 0;
  const size_t len = static_cast<size_t>(hi - lo);
  const auto inside = [&](const void* base, uint64_t size) {
    const uintptr_t s = reinterpret_cast<uintptr_t>(base);
    return base != nullptr && b >= s && b + bytes <= s + size;
  };
  // in the read-only mapping: its pages fault in again from the file
  if (map_ && inside(static_cast<const uint8_t*>(map_) + weights_offset_, weights_size_)) {
#ifdef MADV_DONTNEED
    return madvise(reinterpret_cast<void*>(lo), len, MADV_DONTNEED) == 0 ? len : 0;
#else
    return 0;
#endif
  }
#if defined(__linux__)
  // in the huge-page copy (anonymous: MADV_DONTNEED would lose its bytes): the file's pages of the
  // same bytes mapped over it, read-only (its file offset: the copy is page-congruent with the file)
  std::lock_guard<std::mutex> lk(huge_mu_);
  if (fd_ >= 0 && huge_ && inside(static_cast<const uint8_t*>(huge_) + huge_lead_, weights_size_)) {
    const uint64_t off = weights_offset_ - huge_lead_ + (lo - reinterpret_cast<uintptr_t>(huge_));
    // (a failed MAP_FIXED leaves the copy's pages as they were from Linux 6.12 on; before, the
    // kernel may have unmapped the range first: it fails only for want of kernel memory or of
    // mappings, vm.max_map_count, which the hand-backs of one model use a few of per weight)
    void* r = mmap(reinterpret_cast<void*>(lo), len, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd_, static_cast<off_t>(off));
    if (r == MAP_FAILED) return 0;
    huge_released_.store(true, std::memory_order_release);
    return len;
  }
#endif
  return 0;
#endif
}

void ModelFile::read_tensor(const TensorEntry& e, uint8_t* dst) const {
#ifndef _WIN32
  if (weights_in_mapping() && fd_ >= 0) {
    check_unchanged();
    const uint64_t at = weights_offset_ + e.offset;
    uint64_t got = 0;
    while (got < e.size) {
      const ssize_t r = ::pread(fd_, dst + got, static_cast<size_t>(e.size - got), static_cast<off_t>(at + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw_format("weights", e.name, "'" + path_ + "': " +
                                            (r < 0 ? std::string("read failed: ") + std::strerror(errno)
                                                   : std::string("the file ends inside the tensor (changed on disk "
                                                                 "since load: load it again)")));
      got += static_cast<uint64_t>(r);
    }
    return;
  }
#endif
  std::memcpy(dst, tensor_data(e), static_cast<size_t>(e.size));
}

void ModelFile::check_unchanged() const {
#ifndef _WIN32
  // Windows refuses to truncate or overwrite a file while a view of it is mapped.
  if (fd_ < 0) return;
  struct stat st;
  bool same = fstat(fd_, &st) == 0;
  if (same) {
#if defined(__APPLE__)
    const int64_t ms = static_cast<int64_t>(st.st_mtimespec.tv_sec), mns = static_cast<int64_t>(st.st_mtimespec.tv_nsec);
#else
    const int64_t ms = static_cast<int64_t>(st.st_mtim.tv_sec), mns = static_cast<int64_t>(st.st_mtim.tv_nsec);
#endif
    same = static_cast<uint64_t>(st.st_size) == st_size_ && static_cast<uint64_t>(st.st_ino) == st_ino_ &&
           static_cast<uint64_t>(st.st_dev) == st_dev_ && ms == st_mtime_s_ && mns == st_mtime_ns_;
  }
  if (!same)
    throw_format("", "", "'" + path_ + "' changed on disk since load (size, inode or modification time differ): "
                         "load it again");
#endif
}

void ModelFile::load(const uint8_t* data, uint64_t size) {
  // 1. The marker: the first line that is exactly `~~~weights`, within the bound.
  uint64_t scan = size < kMaxHead + kMarker.size() ? size : kMaxHead + kMarker.size();
  std::string_view head_and_more(reinterpret_cast<const char*>(data), static_cast<size_t>(scan));
  size_t marker = std::string_view::npos;
  for (size_t from = 0;;) {
    size_t at = head_and_more.find(kMarker, from);
    if (at == std::string_view::npos) break;
    if (at == 0 || head_and_more[at - 1] == '\n') {
      marker = at;
      break;
    }
    from = at + 1;
  }
  if (marker == std::string_view::npos) {
    throw_format("weights", "",
                 size > kMaxHead ? "no ~~~weights marker within the first 256 MiB"
                                 : "no ~~~weights marker (not a .model file, or truncated)");
  }
  std::string_view head = head_and_more.substr(0, marker);
  weights_offset_ = marker + kMarker.size();
  weights_.store(data + weights_offset_, std::memory_order_release);
  weights_size_ = size - weights_offset_;

  // 2. Sections: lines that are exactly `~~~name`; `\~~~` at a line start is an escape.
  std::string current = "frontmatter";
  std::string text;
  auto finish = [&](bool last) {
    if (last && !text.empty() && text.back() == '\n') {
      // Writers pad the last line of the head with spaces (64-byte alignment).
      size_t end = text.size() - 1;
      size_t b = end;
      while (b > 0 && text[b - 1] == ' ') --b;
      text.erase(b, end - b);
    }
    sections_[current] = std::move(text);
    text.clear();
  };
  size_t pos = 0;
  while (pos < head.size()) {
    size_t nl = head.find('\n', pos);
    size_t end = nl == std::string_view::npos ? head.size() : nl + 1;
    std::string_view line = head.substr(pos, end - pos);
    std::string_view body = line.substr(0, line.size() - (line.back() == '\n' ? 1 : 0));
    if (body.size() > 3 && body.substr(0, 3) == "~~~" && valid_section_name(body.substr(3))) {
      finish(false);
      current = std::string(body.substr(3));
      if (current == "frontmatter") throw_format(current, "", "reserved section name");
      if (sections_.count(current)) throw_format(current, "", "section appears twice");
      section_order_.push_back(current);
    } else if (is_escaped_fence(body)) {
      text.append(line.substr(1));
    } else {
      text.append(line);
    }
    pos = end;
  }
  finish(true);
  for (const auto& kv : sections_) {
    size_t bad = toml::invalid_utf8_offset(kv.second);
    if (bad != std::string::npos)
      throw_format(kv.first, "", "invalid UTF-8 at byte " + std::to_string(bad) + " of the section");
  }

  // 3. Frontmatter: [[files]] must declare the exact size of the weights.
  frontmatter_ = toml::parse(sections_["frontmatter"], "frontmatter");
  const toml::Value* files = frontmatter_.find("files");
  if (!files) throw_format("frontmatter", "files", "missing [[files]] (the weights entry carries the size)");
  if (!files->is_array()) throw_format("frontmatter", "files", "must be an array of tables");
  const toml::Value* weights_entry = nullptr;
  for (const toml::Value& f : files->as_array()) {
    if (!f.is_table()) throw_format("frontmatter", "files", "must be an array of tables");
    const toml::Value* n = f.find("name");
    if (n && n->is_string() && n->as_string() == "weights") weights_entry = &f;
  }
  if (!weights_entry) throw_format("frontmatter", "files", "no [[files]] entry named 'weights'");
  const toml::Value* declared = weights_entry->find("size");
  if (!declared || !declared->is_int() || declared->as_int() < 0)
    throw_format("frontmatter", "files.size", "the weights entry needs a non-negative integer size");
  if (static_cast<uint64_t>(declared->as_int()) != weights_size_) {
    throw_format("frontmatter", "files.size",
                 "weights entry declares " + std::to_string(declared->as_int()) + " bytes but the file holds " +
                     std::to_string(weights_size_) + " (truncated or corrupted file)");
  }

  // 4. Required sections.
  for (const char* req : {"config", "tensors"})
    if (!sections_.count(req)) throw_format(req, "", "required section is missing");
  config_ = toml::parse(sections_["config"], "config");

  // 5. The tensor index.
  toml::Value index = toml::parse(sections_["tensors"], "tensors");
  tensors_.reserve(index.as_table().size());
  for (auto& kv : index.as_table()) {
    const std::string& name = kv.first;
    const toml::Value& t = kv.second;
    if (!t.is_table()) throw_format("tensors", name, "each tensor must be a table");
    TensorEntry e;
    e.name = name;

    const toml::Value& shape = require(t, "tensors", name, "shape");
    if (!shape.is_array()) throw_format("tensors", name, "'shape' must be an array of integers");
    if (shape.as_array().size() > kMaxDims) throw_format("tensors", name, "'shape' has too many dimensions");
    uint64_t count = 1;
    bool overflow = false;
    for (const toml::Value& d : shape.as_array()) {
      if (!d.is_int() || d.as_int() < 0)
        throw_format("tensors", name, "'shape' must be an array of non-negative integers");
      e.shape.push_back(d.as_int());
      overflow = overflow || !mul_ok(count, static_cast<uint64_t>(d.as_int()), &count);
    }
    if (overflow || count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw_format("tensors", name, "element count of shape " + shape_str(e.shape) + " overflows");

    const toml::Value& enc = require(t, "tensors", name, "encoding");
    if (!enc.is_string()) throw_format("tensors", name, "'encoding' must be a string");
    if (!parse_encoding(enc.as_string(), &e.dtype))
      throw_format("tensors", name, "unknown encoding '" + enc.as_string() + "'");
    e.offset = non_negative(require(t, "tensors", name, "offset"), "tensors", name, "offset");
    e.size = non_negative(require(t, "tensors", name, "size"), "tensors", name, "size");

    const DTypeInfo& info = dtype_info(e.dtype);
    std::string declared_as = std::string(info.encoding) + " " + shape_str(e.shape);
    if (info.block > 1) {
      if (e.shape.empty())
        throw_weight_format(name, declared_as, e.size, "a quantized tensor needs at least one dimension");
      if (e.shape.back() % info.block != 0)
        throw_weight_format(name, declared_as, e.size,
                            "innermost dimension " + std::to_string(e.shape.back()) +
                                " is not a multiple of the block size " + std::to_string(info.block));
    }
    uint64_t expected = 0;
    if (!mul_ok(count / info.block, info.block_bytes, &expected))
      throw_format("tensors", name, "byte size of shape " + shape_str(e.shape) + " overflows");
    if (expected != e.size)
      throw_weight_format(name, declared_as, e.size, "expected " + std::to_string(expected) + " bytes");
    if (e.offset > weights_size_ || e.size > weights_size_ - e.offset)
      throw_format("tensors", name,
                   "bytes [" + std::to_string(e.offset) + ", +" + std::to_string(e.size) +
                       ") lie outside the weights (" + std::to_string(weights_size_) + " bytes)");
    if (!index_.emplace(name, tensors_.size()).second) throw_format("tensors", name, "duplicate tensor");
    tensors_.push_back(std::move(e));
  }
}

bool ModelFile::has_section(const std::string& name) const { return sections_.count(name) != 0; }

const std::string& ModelFile::section_text(const std::string& name) const {
  auto it = sections_.find(name);
  if (it == sections_.end()) throw_format(name, "", "no such section");
  return it->second;
}

toml::Value ModelFile::section_toml(const std::string& name) const {
  if (name == "frontmatter") return frontmatter_;
  if (name == "config") return config_;
  return toml::parse(section_text(name), name);
}

const TensorEntry* ModelFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace cyb
