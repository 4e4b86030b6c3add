// The CHECK macro of the native test programs: prints the failed condition with
// its place and marks the run failed (g_fail; the program's exit status), and
// keeps going so that one run reports every failure. Thread-safe.
#pragma once
#include <atomic>
#include <cstdio>

inline std::atomic<int> g_fail{0};

#define CHECK(c)                                                 \
  do {                                                           \
    if (!(c)) {                                                  \
      std::printf("FAILED %s:%d: %s\n", __FILE__, __LINE__, #c); \
      g_fail = 1;                                                \
    }                                                            \
  } while (0)
