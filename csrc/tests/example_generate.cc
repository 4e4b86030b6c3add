// A C++ program using the core without Python: load a .model, prefill token
// ids, then greedy-decode. Usage:
//   example_generate MODEL.model [--precise] [--threads N] [-n N] ID [ID ...]
// Prints the generated ids on one line.
//
// Under CYB_SANITIZE the build also makes three copies of this program with one
// planted bug each (CYB_PLANT = 1: a leak, 2: a heap overflow, 3: a signed
// overflow for UBSan): tools/sanitizer_selftest.sh shows that the command the
// sanitizer tier runs on the real program fails for each of them.
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/errors.h"
#include "runtime/model.h"

#ifdef CYB_PLANT
// The planted bugs run after a real forward, where the tier's real bugs would be.
static void __attribute__((noinline)) plant(const std::vector<float>& logits, int n_new) {
#if CYB_PLANT == 1
  float* lost = new float[64];  // never freed: LeakSanitizer reports it at exit
  lost[0] = logits[0];
  lost = nullptr;
#elif CYB_PLANT == 2
  volatile float past_end = logits.data()[logits.size()];  // heap-buffer-overflow (read)
  (void)past_end;
#elif CYB_PLANT == 3
  int big = INT_MAX - 1;
  big += n_new;  // signed overflow for any n_new >= 2: UBSan (no recovery) aborts
  std::printf("%d\n", big);
#endif
}
#endif

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL [--precise] [--threads N] [-n N] ID [ID ...]\n", argv[0]);
    return 2;
  }
  cyb::LoadOptions opts;
  int n_new = 8;
  std::vector<int32_t> ids;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--precise")) opts.precise = true;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) opts.threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "-n") && i + 1 < argc) n_new = std::atoi(argv[++i]);
    else ids.push_back(static_cast<int32_t>(std::atol(argv[i])));
  }
  try {
    auto model = cyb::Model::load(argv[1], opts);
    auto conv = model->new_conversation(static_cast<int64_t>(ids.size()) + n_new + 1);
    std::vector<float> logits(static_cast<size_t>(model->vocab_size()));
    model->forward(*conv, ids.data(), static_cast<int64_t>(ids.size()), false, logits.data());
#ifdef CYB_PLANT
    plant(logits, n_new);
#endif
    for (int step = 0; step < n_new; ++step) {
      int32_t best = 0;
      for (int64_t v = 1; v < model->vocab_size(); ++v)
        if (logits[static_cast<size_t>(v)] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(v);
      std::printf("%s%d", step ? " " : "", best);
      model->forward(*conv, &best, 1, false, logits.data());
    }
    std::printf("\n");
  } catch (const cyb::Error& e) {
    std::fprintf(stderr, "%s: %s\n", cyb::error_kind_name(e.kind()), e.what());
    return 1;
  }
  return 0;
}
