// What the machine can still give: the memory budget of load and
// new_conversation (docs/errors.md "Guarantees") defaults to it.
#pragma once
#include <cstdint>

namespace cyb {

// Available physical memory in bytes (Linux: MemAvailable of /proc/meminfo;
// macOS: free + inactive pages; Windows: ullAvailPhys); -1 where unknown.
int64_t available_memory_bytes();

// available_memory_bytes() as read at most a second ago (one reading shared by every caller within
// the second, a fresh one after it): for checks made on every run of a small graph, where a read of
// /proc/meminfo is a sizable part of the run; a check this reading refuses is made again against a
// fresh one (check_memory_budget).
int64_t available_memory_recent();

}  // namespace cyb
