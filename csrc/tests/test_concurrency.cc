// Concurrency of the runtime (docs/errors.md "Guarantees"), built and run under
// ThreadSanitizer by tools/tsan.sh (and in the ordinary builds):
//   1. the thread pool driven by two callers at once gives each its own results;
//   2. for each .model given (argv, or CYB_CONCURRENCY_MODELS, ':'-separated):
//      two threads, each with its own conversation of the same model, prefill and
//      decode concurrently and get bit-for-bit the logits of a sequential run;
//      a second thread's forward on a conversation that is mid-forward fails with
//      InvalidConfig(field="conversation") and leaves the first forward intact.
// Exit status 0 = all passed.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "core/thread_pool.h"
#include "runtime/model.h"
#include "tests/check.h"

using namespace cyb;


static void pool_two_callers() {
  ThreadPool pool(2);
  auto job = [&pool](int seed, std::vector<int64_t>* out) {
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<int64_t> v(1000, 0);
      pool.parallel_for(1000, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) v[static_cast<size_t>(i)] = i * seed + rep;
      });
      int64_t s = 0;
      for (int64_t x : v) s += x;
      out->push_back(s);
    }
  };
  std::vector<int64_t> a, b;
  std::thread ta(job, 3, &a), tb(job, 7, &b);
  ta.join();
  tb.join();
  for (int rep = 0; rep < 200; ++rep) {
    CHECK(a[static_cast<size_t>(rep)] == 3 * 499500 + 1000 * rep);
    CHECK(b[static_cast<size_t>(rep)] == 7 * 499500 + 1000 * rep);
  }
  // The clamp rule of every entry point.
  CHECK(ThreadPool::resolve_threads(0) >= 1);
  CHECK(ThreadPool::resolve_threads(int64_t(1) << 40) == ThreadPool::max_threads());
  CHECK(ThreadPool::max_threads() <= 256);
  bool threw = false;
  try {
    ThreadPool::resolve_threads(-1);
  } catch (const Error& e) {
    threw = e.kind() == ErrorKind::InvalidConfig;
  }
  CHECK(threw);
}

// A prompt of n ids from a seed (within the vocabulary), and a greedy decode.
static std::vector<int32_t> prompt(int64_t vocab, int n, uint32_t seed) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    ids.push_back(static_cast<int32_t>((seed >> 8) % static_cast<uint32_t>(vocab)));
  }
  return ids;
}

// Prefill then `steps` greedy decode steps; every step's logits appended to *out.
static void run(Model& m, Conversation& c, const std::vector<int32_t>& ids, int steps, std::vector<float>* out) {
  const int64_t V = m.vocab_size();
  std::vector<float> logits(static_cast<size_t>(V));
  m.forward(c, ids.data(), static_cast<int64_t>(ids.size()), false, logits.data());
  for (int s = 0;; ++s) {
    out->insert(out->end(), logits.begin(), logits.end());
    if (s == steps) break;
    int32_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    m.forward(c, &best, 1, false, logits.data());
  }
}

struct Busy {
  Model* m;
  Conversation* c;
  int32_t id;
  bool rejected = false;
  bool other_error = false;
};

// Runs in the middle of a long forward (between its chunks): another thread's
// forward on the same conversation must be refused.
static void try_same_conversation(void* user, int64_t, int64_t) {
  Busy& b = *static_cast<Busy*>(user);
  std::thread t([&b] {
    std::vector<float> l(static_cast<size_t>(b.m->vocab_size()));
    try {
      b.m->forward(*b.c, &b.id, 1, false, l.data());
    } catch (const Error& e) {
      b.rejected = e.kind() == ErrorKind::InvalidConfig && std::string(e.what()).find("another thread") != std::string::npos;
      b.other_error = !b.rejected;
    }
  });
  t.join();
}

static void model_checks(const std::string& path) {
  LoadOptions o;
  o.threads = 2;
  std::shared_ptr<Model> m = Model::load(path, o);
  const int64_t V = m->vocab_size();
  const std::vector<int32_t> p1 = prompt(V, 12, 1), p2 = prompt(V, 9, 2);
  const int steps = 4;

  std::vector<float> seq1, seq2;
  {
    auto c1 = m->new_conversation(64), c2 = m->new_conversation(64);
    run(*m, *c1, p1, steps, &seq1);
    run(*m, *c2, p2, steps, &seq2);
  }
  std::vector<float> par1, par2;
  {
    auto c1 = m->new_conversation(64), c2 = m->new_conversation(64);
    std::thread t1([&] { run(*m, *c1, p1, steps, &par1); });
    std::thread t2([&] { run(*m, *c2, p2, steps, &par2); });
    t1.join();
    t2.join();
  }
  CHECK(par1.size() == seq1.size() && par2.size() == seq2.size());
  CHECK(std::memcmp(par1.data(), seq1.data(), seq1.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(par2.data(), seq2.data(), seq2.size() * sizeof(float)) == 0);
  bool finite = true;
  for (float x : par1) finite = finite && std::isfinite(x);
  CHECK(finite);

  // Same conversation from a second thread while a two-chunk forward runs.
  const int n = static_cast<int>(Model::kForwardChunk) + 8;
  const std::vector<int32_t> lp = prompt(V, n, 3);
  std::vector<float> ref(static_cast<size_t>(V)), got(static_cast<size_t>(V));
  {
    auto c = m->new_conversation(n + 1);
    m->forward(*c, lp.data(), n, false, ref.data());
  }
  auto c = m->new_conversation(n + 1);
  Busy b{m.get(), c.get(), 1};
  ForwardProgress hook;
  hook.fn = &try_same_conversation;
  hook.user = &b;
  m->forward(*c, lp.data(), n, false, got.data(), &hook);
  CHECK(b.rejected);
  CHECK(!b.other_error);
  CHECK(c->position() == n);
  CHECK(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)) == 0);
  std::printf("%s: concurrent conversations match the sequential run (%zu logits each), "
              "same-conversation use from a second thread refused\n",
              path.c_str(), seq1.size());
}

int main(int argc, char** argv) {
  pool_two_callers();
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) paths.push_back(argv[i]);
  if (paths.empty()) {
    if (const char* env = std::getenv("CYB_CONCURRENCY_MODELS")) {
      std::string s = env;
      size_t a = 0;
      while (a <= s.size()) {
        size_t e = s.find(':', a);
        if (e == std::string::npos) e = s.size();
        if (e > a) paths.push_back(s.substr(a, e - a));
        a = e + 1;
      }
    }
  }
  if (paths.empty()) std::printf("no .model given (argv or CYB_CONCURRENCY_MODELS): thread pool checks only\n");
  for (const std::string& p : paths) {
    try {
      model_checks(p);
    } catch (const std::exception& e) {
      std::printf("FAILED %s: %s\n", p.c_str(), e.what());
      g_fail = 1;
    }
  }
  std::printf(g_fail ? "FAILED\n" : "OK\n");
  return g_fail ? 1 : 0;
}
