#include "core/memory_budget.h"

#include <chrono>
#include <mutex>

#if defined(__linux__)
#include <cstdio>
#include <cstring>
#elif defined(__APPLE__)
#include <mach/mach.h>
#include <unistd.h>
#elif defined(_WIN32)
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#endif

namespace cyb {

int64_t available_memory_bytes() {
#if defined(__linux__)
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "MemAvailable:", 13) == 0) {
      if (std::sscanf(line + 13, "%lld", &kb) != 1) kb = -1;
      break;
    }
  }
  std::fclose(f);
  return kb < 0 ? -1 : static_cast<int64_t>(kb) * 1024;
#elif defined(__APPLE__)
  vm_statistics64_data_t vm;
  mach_msg_type_number_t count = HOST_VM_INFO64_COUNT;
  if (host_statistics64(mach_host_self(), HOST_VM_INFO64, reinterpret_cast<host_info64_t>(&vm), &count) !=
      KERN_SUCCESS)
    return -1;
  const int64_t page = static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  return (static_cast<int64_t>(vm.free_count) + static_cast<int64_t>(vm.inactive_count)) * page;
#elif defined(_WIN32)
  MEMORYSTATUSEX st;
  st.dwLength = sizeof st;
  if (!GlobalMemoryStatusEx(&st)) return -1;
  return static_cast<int64_t>(st.ullAvailPhys);
#else
  return -1;
#endif
}

int64_t available_memory_recent() {
  static std::mutex mu;
  static int64_t value = -1;
  static std::chrono::steady_clock::time_point at;
  static bool read = false;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lk(mu);
  if (!read || now - at >= std::chrono::seconds(1)) {
    value = available_memory_bytes();
    at = now;
    read = true;
  }
  return value;
}

}  // namespace cyb
