// Greedy generation from token ids through the C++ API:
//   generate_cpp MODEL.model N_NEW ID [ID ...]   -> the N_NEW generated ids on one line
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cyb_llm/core/errors.h>
#include <cyb_llm/runtime/model.h>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL N_NEW ID [ID ...]\n", argv[0]);
    return 2;
  }
  const int n_new = std::atoi(argv[2]);
  std::vector<int32_t> ids;
  for (int i = 3; i < argc; ++i) ids.push_back(static_cast<int32_t>(std::atol(argv[i])));
  try {
    auto model = cyb::Model::load(argv[1], cyb::LoadOptions{});
    auto conv = model->new_conversation(static_cast<int64_t>(ids.size()) + n_new + 1);
    std::vector<float> logits(static_cast<size_t>(model->vocab_size()));
    model->forward(*conv, ids.data(), static_cast<int64_t>(ids.size()), false, logits.data());
    for (int step = 0; step < n_new; ++step) {
      int32_t best = 0;
      for (int64_t v = 1; v < model->vocab_size(); ++v)
        if (logits[static_cast<size_t>(v)] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(v);
      std::printf("%s%d", step ? " " : "", best);
      if (step + 1 < n_new) model->forward(*conv, &best, 1, false, logits.data());
    }
    std::printf("\n");
  } catch (const cyb::Error& e) {
    std::fprintf(stderr, "%s: %s\n", cyb::error_kind_name(e.kind()), e.what());
    return 1;
  }
  return 0;
}
