/* Many threads running one module at once, each on its own input, many times: every result must match
 * the expected output (catches shared activation memory or kernel state), and each thread's
 * nnvm_last_error() must be its own. Written only against nnvm_runtime.h.
 *
 *   stress_threads MODEL.so IN.bin WANT.bin THREADS RUNS
 * IN.bin holds THREADS float32 inputs back to back, WANT.bin the THREADS expected outputs.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnvm_runtime.h"

static nnvm_module *model;
static size_t n_in, n_out;
static float *inputs, *wants;
static int runs;

static size_t count(const nnvm_tensor_info *t) {
  size_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
  return n;
}

static float *read_floats(const char *path, size_t n) {
  float *p = malloc(n * sizeof *p);
  FILE *f = fopen(path, "rb");
  if (!p || !f || fread(p, sizeof *p, n, f) != n) {
    fprintf(stderr, "stress: %s: cannot read %zu floats\n", path, n);
    exit(1);
  }
  fclose(f);
  return p;
}

static void *worker(void *arg) {
  long t = (long)arg;
  const float *want = wants + (size_t)t * n_out;
  float *out = malloc(n_out * sizeof *out);
  const void *in[1] = {inputs + (size_t)t * n_in};
  void *outs[1] = {out};
  double scale = 0;
  for (size_t i = 0; i < n_out; i++) scale = fmax(scale, fabs(want[i]));
  nnvm_tensor_info info;
  char expect[64];
  snprintf(expect, sizeof expect, "no input %ld", 100 + t);
  for (int r = 0; r < runs; r++) {
    memset(out, 0xff, n_out * sizeof *out);
    if (nnvm_module_run(model, in, outs) != 0) {
      fprintf(stderr, "stress: thread %ld: %s\n", t, nnvm_last_error());
      return (void *)1;
    }
    for (size_t i = 0; i < n_out; i++)
      if (!(fabs(out[i] - want[i]) <= 1e-4 * scale)) {
        fprintf(stderr, "stress: thread %ld run %d: output %zu is %g, expected %g\n", t, r, i, out[i], want[i]);
        return (void *)1;
      }
    if (nnvm_module_input(model, (int)(100 + t), &info) != -1 || !strstr(nnvm_last_error(), expect)) {
      fprintf(stderr, "stress: thread %ld: last error is %s\n", t, nnvm_last_error());
      return (void *)1;
    }
  }
  free(out);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 6) return 2;
  if (nnvm_module_load("/nonexistent/model.so") != NULL) return 1;
  char mine[256];
  snprintf(mine, sizeof mine, "%s", nnvm_last_error());
  model = nnvm_module_load(argv[1]);
  if (!model) {
    fprintf(stderr, "stress: %s\n", nnvm_last_error());
    return 1;
  }
  nnvm_tensor_info in, out;
  if (nnvm_module_input(model, 0, &in) != 0 || nnvm_module_output(model, 0, &out) != 0) return 1;
  int threads = atoi(argv[4]);
  runs = atoi(argv[5]);
  n_in = count(&in);
  n_out = count(&out);
  inputs = read_floats(argv[2], n_in * (size_t)threads);
  wants = read_floats(argv[3], n_out * (size_t)threads);
  pthread_t *th = calloc((size_t)threads, sizeof *th);
  for (long t = 0; t < threads; t++) pthread_create(&th[t], NULL, worker, (void *)t);
  int failed = 0;
  for (int t = 0; t < threads; t++) {
    void *rc;
    pthread_join(th[t], &rc);
    failed |= rc != NULL;
  }
  if (strcmp(mine, nnvm_last_error()) != 0 || !strstr(mine, "/nonexistent/model.so")) {
    fprintf(stderr, "stress: the main thread's last error changed to %s\n", nnvm_last_error());
    failed = 1;
  }
  nnvm_module_free(model);
  printf("%s: %d threads x %d runs\n", failed ? "FAILED" : "ok", threads, runs);
  return failed;
}
