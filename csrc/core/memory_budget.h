// What the machine can still give: the memory budget of load and
// new_conversation (docs/errors.md "Guarantees") defaults to it.
#pragma once
#include <cstdint>

namespace cyb {

// Available physical memory in bytes (Linux: MemAvailable of /proc/meminfo;
// macOS: free + inactive pages; Windows: ullAvailPhys); -1 where unknown.
int64_t available_memory_bytes();

}  // namespace cyb
