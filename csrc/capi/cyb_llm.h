/* cyb_llm C API: load a .model, run conversations, sample tokens. For bindings
 * from other languages; C++ programs may use the C++ API (runtime/model.h).
 *
 *   cyb_model* m; cyb_conversation* c; cyb_sampler* s;
 *   if (cyb_model_load("x.model", NULL, &m) != CYB_OK) puts(cyb_last_error());
 *   cyb_conversation_new(m, 512, &c);
 *   float* logits = malloc(sizeof(float) * cyb_model_vocab_size(m));
 *   cyb_forward(m, c, ids, n_ids, logits);                 (prefill)
 *   cyb_sampling_config sc = cyb_sampling_default(); sc.temperature = 0;
 *   cyb_sampler_new(&sc, &s); cyb_sample(s, logits, vocab, &token);
 *   ... cyb_sampler_free(s); cyb_conversation_free(c); cyb_model_free(m);
 *
 * Every call that can fail returns a cyb_status; CYB_OK is 0, the others name
 * the error variant (docs/errors.md) and cyb_last_error() gives the message of
 * the last failure on the calling thread. No call lets a C++ exception out.
 * A conversation must not outlive its model; one conversation is used by one
 * thread at a time. */
#ifndef CYB_LLM_H
#define CYB_LLM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CYB_LLM_C_API_VERSION 1

typedef enum cyb_status {
  CYB_OK = 0,
  CYB_ERR_FORMAT = 1,
  CYB_ERR_UNSUPPORTED_OP = 2,
  CYB_ERR_SHAPE_MISMATCH = 3,
  CYB_ERR_MISSING_TENSOR = 4,
  CYB_ERR_WEIGHT_FORMAT = 5,
  CYB_ERR_OUT_OF_MEMORY = 6,
  CYB_ERR_BACKEND_INIT = 7,
  CYB_ERR_INVALID_CONFIG = 8,
  CYB_ERR_TOKENIZER = 9,
  CYB_ERR_INVALID_ARGUMENT = 10, /* a NULL pointer or a negative count */
  CYB_ERR_INTERNAL = 11          /* anything else (a bug: please report it) */
} cyb_status;

typedef struct cyb_model cyb_model;
typedef struct cyb_conversation cyb_conversation;
typedef struct cyb_sampler cyb_sampler;

typedef struct cyb_load_options {
  const char* backend;  /* NULL or "" (platform default), "cpu", "wgpu+rs", "nox" */
  int precise;          /* non-zero: f32 activations and KV cache */
  int threads;          /* 0: all physical cores */
  const char* exec_path; /* NULL or "" (default), "curated", "graph" */
} cyb_load_options;

typedef struct cyb_sampling_config {
  float temperature;         /* 0 = greedy */
  int32_t top_k;             /* 0 = off */
  float top_p;               /* 1 = off */
  float min_p;               /* 0 = off */
  float repetition_penalty;  /* 1 = off */
  float presence_penalty;
  float frequency_penalty;
  int32_t penalty_last_n;    /* -1 = all, 0 = none */
  uint64_t seed;
} cyb_sampling_config;

/* The message of the last failed call on this thread ("" if none). */
const char* cyb_last_error(void);
/* The library version, e.g. "0.1.0". */
const char* cyb_version(void);

cyb_status cyb_model_load(const char* path, const cyb_load_options* options, cyb_model** out);
void cyb_model_free(cyb_model* model);
int64_t cyb_model_vocab_size(const cyb_model* model);
int64_t cyb_model_max_position(const cyb_model* model);

cyb_status cyb_conversation_new(cyb_model* model, int64_t max_context, cyb_conversation** out);
void cyb_conversation_free(cyb_conversation* conversation);
int64_t cyb_conversation_position(const cyb_conversation* conversation);
void cyb_conversation_reset(cyb_conversation* conversation);

/* Runs ids[0..n) at the conversation's position; writes the [vocab] logits of
 * the last position to `logits` (cyb_model_vocab_size floats). */
cyb_status cyb_forward(cyb_model* model, cyb_conversation* conversation, const int32_t* ids, int64_t n,
                       float* logits);

cyb_sampling_config cyb_sampling_default(void);
cyb_status cyb_sampler_new(const cyb_sampling_config* config, cyb_sampler** out);
void cyb_sampler_free(cyb_sampler* sampler);
/* Adds tokens to the penalty history (the prompt; cyb_sample adds what it draws). */
cyb_status cyb_sampler_accept(cyb_sampler* sampler, const int32_t* ids, int64_t n);
cyb_status cyb_sample(cyb_sampler* sampler, const float* logits, int64_t n, int32_t* token);

#ifdef __cplusplus
}
#endif
#endif /* CYB_LLM_H */
