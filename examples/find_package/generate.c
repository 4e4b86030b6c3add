/* Greedy generation from token ids through the C API:
 *   generate_c MODEL.model N_NEW ID [ID ...]   -> the N_NEW generated ids on one line */
#include <stdio.h>
#include <stdlib.h>

#include <cyb_llm.h>

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL N_NEW ID [ID ...]\n", argv[0]);
    return 2;
  }
  int n_new = atoi(argv[2]);
  int n_ids = argc - 3;
  int32_t* ids = malloc(sizeof(int32_t) * (size_t)n_ids);
  for (int i = 0; i < n_ids; ++i) ids[i] = (int32_t)atol(argv[3 + i]);

  cyb_model* model = NULL;
  cyb_conversation* conv = NULL;
  cyb_sampler* sampler = NULL;
  float* logits = NULL;
  int rc = 1;
  if (cyb_model_load(argv[1], NULL, &model) != CYB_OK) goto done;
  if (cyb_conversation_new(model, n_ids + n_new + 1, &conv) != CYB_OK) goto done;
  int64_t vocab = cyb_model_vocab_size(model);
  logits = malloc(sizeof(float) * (size_t)vocab);
  cyb_sampling_config sc = cyb_sampling_default();
  sc.temperature = 0.0f; /* greedy */
  if (cyb_sampler_new(&sc, &sampler) != CYB_OK) goto done;
  if (cyb_sampler_accept(sampler, ids, n_ids) != CYB_OK) goto done;
  if (cyb_forward(model, conv, ids, n_ids, logits) != CYB_OK) goto done;
  for (int step = 0; step < n_new; ++step) {
    int32_t token;
    if (cyb_sample(sampler, logits, vocab, &token) != CYB_OK) goto done;
    printf("%s%d", step ? " " : "", token);
    if (step + 1 < n_new && cyb_forward(model, conv, &token, 1, logits) != CYB_OK) goto done;
  }
  printf("\n");
  rc = 0;
done:
  if (rc) fprintf(stderr, "error: %s\n", cyb_last_error());
  cyb_sampler_free(sampler);
  cyb_conversation_free(conv);
  cyb_model_free(model);
  free(logits);
  free(ids);
  return rc;
}
