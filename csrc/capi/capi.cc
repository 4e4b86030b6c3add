// The C API (csrc/capi/cyb_llm.h) over the C++ runtime: every entry point
// catches what the core throws and turns it into a status + message.
#include "capi/cyb_llm.h"

#include <memory>
#include <new>
#include <string>

#include "core/errors.h"
#include "runtime/model.h"
#include "sampling/sampler.h"

#ifndef CYB_VERSION
#define CYB_VERSION "0.0.0"
#endif

struct cyb_model {
  std::shared_ptr<cyb::Model> m;
};
struct cyb_conversation {
  std::shared_ptr<cyb::Model> owner;  // keeps the weights alive
  std::unique_ptr<cyb::Conversation> c;
};
struct cyb_sampler {
  cyb::Sampler s;
};

namespace {

thread_local std::string g_last_error;

cyb_status status_of(cyb::ErrorKind k) {
  switch (k) {
    case cyb::ErrorKind::Format: return CYB_ERR_FORMAT;
    case cyb::ErrorKind::UnsupportedOp: return CYB_ERR_UNSUPPORTED_OP;
    case cyb::ErrorKind::ShapeMismatch: return CYB_ERR_SHAPE_MISMATCH;
    case cyb::ErrorKind::MissingTensor: return CYB_ERR_MISSING_TENSOR;
    case cyb::ErrorKind::WeightFormatMismatch: return CYB_ERR_WEIGHT_FORMAT;
    case cyb::ErrorKind::OutOfMemory: return CYB_ERR_OUT_OF_MEMORY;
    case cyb::ErrorKind::BackendInit: return CYB_ERR_BACKEND_INIT;
    case cyb::ErrorKind::InvalidConfig: return CYB_ERR_INVALID_CONFIG;
    case cyb::ErrorKind::Tokenizer: return CYB_ERR_TOKENIZER;
  }
  return CYB_ERR_INTERNAL;
}

cyb_status fail(cyb_status s, std::string msg) {
  g_last_error = std::move(msg);
  return s;
}

// Runs f, mapping every exception to a status.
template <class F>
cyb_status guarded(F&& f) {
  try {
    f();
    g_last_error.clear();
    return CYB_OK;
  } catch (const cyb::Error& e) {
    return fail(status_of(e.kind()), std::string(cyb::error_kind_name(e.kind())) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return fail(CYB_ERR_OUT_OF_MEMORY, "OutOfMemory: allocation failed");
  } catch (const std::exception& e) {
    return fail(CYB_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(CYB_ERR_INTERNAL, "internal error");
  }
}

cyb_status null_arg(const char* what) { return fail(CYB_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL"); }

}  // namespace

extern "C" {

const char* cyb_last_error(void) { return g_last_error.c_str(); }
const char* cyb_version(void) { return CYB_VERSION; }

cyb_status cyb_model_load(const char* path, const cyb_load_options* options, cyb_model** out) {
  if (!path) return null_arg("path");
  if (!out) return null_arg("out");
  *out = nullptr;
  return guarded([&] {
    cyb::LoadOptions o;
    if (options) {
      o.backend = options->backend ? options->backend : "";
      o.precise = options->precise != 0;
      o.threads = options->threads;
      o.exec_path = options->exec_path ? options->exec_path : "";
    }
    auto m = cyb::Model::load(std::string(path), o);
    *out = new cyb_model{std::move(m)};
  });
}

void cyb_model_free(cyb_model* model) { delete model; }
int64_t cyb_model_vocab_size(const cyb_model* model) { return model ? model->m->vocab_size() : 0; }
int64_t cyb_model_max_position(const cyb_model* model) { return model ? model->m->max_position() : 0; }

cyb_status cyb_conversation_new(cyb_model* model, int64_t max_context, cyb_conversation** out) {
  if (!model) return null_arg("model");
  if (!out) return null_arg("out");
  *out = nullptr;
  if (max_context <= 0) return fail(CYB_ERR_INVALID_ARGUMENT, "max_context must be positive");
  return guarded([&] { *out = new cyb_conversation{model->m, model->m->new_conversation(max_context)}; });
}

void cyb_conversation_free(cyb_conversation* conversation) { delete conversation; }
int64_t cyb_conversation_position(const cyb_conversation* c) { return c ? c->c->position() : 0; }
void cyb_conversation_reset(cyb_conversation* c) {
  if (c) c->c->reset_kv_cache();
}

cyb_status cyb_forward(cyb_model* model, cyb_conversation* conversation, const int32_t* ids, int64_t n,
                       float* logits) {
  if (!model) return null_arg("model");
  if (!conversation) return null_arg("conversation");
  if (!ids) return null_arg("ids");
  if (!logits) return null_arg("logits");
  if (n <= 0) return fail(CYB_ERR_INVALID_ARGUMENT, "n must be positive");
  if (conversation->owner != model->m)
    return fail(CYB_ERR_INVALID_ARGUMENT, "the conversation belongs to another model");
  return guarded([&] { model->m->forward(*conversation->c, ids, n, false, logits); });
}

cyb_sampling_config cyb_sampling_default(void) {
  const cyb::SamplingConfig d;
  return cyb_sampling_config{d.temperature,      d.top_k,           d.top_p,
                             d.min_p,            d.repetition_penalty, d.presence_penalty,
                             d.frequency_penalty, d.penalty_last_n,  d.seed};
}

cyb_status cyb_sampler_new(const cyb_sampling_config* config, cyb_sampler** out) {
  if (!config) return null_arg("config");
  if (!out) return null_arg("out");
  *out = nullptr;
  return guarded([&] {
    cyb::SamplingConfig c;
    c.temperature = config->temperature;
    c.top_k = config->top_k;
    c.top_p = config->top_p;
    c.min_p = config->min_p;
    c.repetition_penalty = config->repetition_penalty;
    c.presence_penalty = config->presence_penalty;
    c.frequency_penalty = config->frequency_penalty;
    c.penalty_last_n = config->penalty_last_n;
    c.seed = config->seed;
    cyb::validate(c);
    *out = new cyb_sampler{cyb::Sampler(c)};
  });
}

void cyb_sampler_free(cyb_sampler* sampler) { delete sampler; }

cyb_status cyb_sampler_accept(cyb_sampler* sampler, const int32_t* ids, int64_t n) {
  if (!sampler) return null_arg("sampler");
  if (n < 0) return fail(CYB_ERR_INVALID_ARGUMENT, "n must not be negative");
  if (n > 0 && !ids) return null_arg("ids");
  return guarded([&] { sampler->s.accept(ids, static_cast<size_t>(n)); });
}

cyb_status cyb_sample(cyb_sampler* sampler, const float* logits, int64_t n, int32_t* token) {
  if (!sampler) return null_arg("sampler");
  if (!logits) return null_arg("logits");
  if (!token) return null_arg("token");
  if (n <= 0) return fail(CYB_ERR_INVALID_ARGUMENT, "n must be positive");
  return guarded([&] {
    *token = sampler->s.sample(logits, n);
    sampler->s.accept(*token);
  });
}

}  // extern "C"
