/* nnvm-run: the device runtime. Loads an exported nnvm module (a shared library) and runs it on .npy
 * files, with no Python on the device.
 *
 *   nnvm-run MODEL.so --info                       inputs and outputs: name, dtype, shape
 *   nnvm-run MODEL.so IN.npy... -o OUT.npy...      run once (inputs in the model's order)
 *   nnvm-run MODEL.so IN.npy... -o OUT.npy... -r N also time N more runs, print the median in ms
 *
 * The module carries its own plan (nnvm_model_run, see glue.py), so this file only parses arguments
 * and the .npy format: little-endian C-order arrays whose dtype and shape must match the model's.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct nnvm_tensor_info {
  const char *name;
  const char *descr;
  int32_t ndim;
  const int64_t *shape;
  uint64_t nbytes;
};
typedef int32_t (*run_fn)(const void *const *, void *const *);

static const char *model_path;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "nnvm-run: %s: %s\n", what, detail);
  exit(1);
}

static void *symbol(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) die(model_path, "not an nnvm module exported with a C entry point (nnvm_model_run missing)");
  return p;
}

/* A Python tuple, as numpy writes shapes: "(1, 3)", "(3,)", "()". */
static void shape_text(const struct nnvm_tensor_info *t, char *buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "(");
  for (int32_t d = 0; d < t->ndim && used < n; d++)
    used += (size_t)snprintf(buf + used, n - used, d ? ", %lld" : "%lld", (long long)t->shape[d]);
  if (used < n) snprintf(buf + used, n - used, t->ndim == 1 ? ",)" : ")");
}

/* Reads IN.npy into a fresh buffer after checking its header against the model's input t. */
static void *read_npy(const char *path, const struct nnvm_tensor_info *t) {
  FILE *f = fopen(path, "rb");
  if (!f) die(path, "cannot open");
  unsigned char magic[10];
  if (fread(magic, 1, 10, f) != 10 || memcmp(magic, "\x93NUMPY", 6) != 0) die(path, "not a .npy file");
  uint32_t hlen = magic[8] | (uint32_t)magic[9] << 8;
  if (magic[6] >= 2) {
    unsigned char more[2];
    if (fread(more, 1, 2, f) != 2) die(path, "truncated .npy header");
    hlen |= (uint32_t)more[0] << 16 | (uint32_t)more[1] << 24;
  }
  char *header = calloc(hlen + 1, 1);
  if (!header || fread(header, 1, hlen, f) != hlen) die(path, "truncated .npy header");
  char want[256];
  snprintf(want, sizeof want, "'descr': '%s'", t->descr);
  if (!strstr(header, want)) die(path, "dtype differs from the model's input");
  if (strstr(header, "'fortran_order': True")) die(path, "Fortran-order arrays are not supported");
  char *s = strstr(header, "'shape': (");
  if (!s) die(path, "no shape in the .npy header");
  s += 10;
  for (int32_t d = 0; d < t->ndim; d++) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v != t->shape[d]) die(path, "shape differs from the model's input");
    for (s = end; *s == ',' || *s == ' ' || *s == 'L'; s++) {
    }
  }
  if (*s != ')') die(path, "shape differs from the model's input");
  free(header);
  void *data = malloc(t->nbytes ? t->nbytes : 1);
  if (!data || fread(data, 1, t->nbytes, f) != t->nbytes) die(path, "fewer bytes than its shape needs");
  fclose(f);
  return data;
}

static void write_npy(const char *path, const struct nnvm_tensor_info *t, const void *data) {
  char shape[160], header[256];
  shape_text(t, shape, sizeof shape);
  int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                   t->descr, shape);
  int total = 10 + n + 1;
  int pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (!f) die(path, "cannot create");
  uint32_t hlen = (uint32_t)(n + pad + 1);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, hlen & 0xff, hlen >> 8};
  fwrite(pre, 1, 10, f);
  fwrite(header, 1, (size_t)n, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  if (fwrite(data, 1, t->nbytes, f) != t->nbytes || fclose(f) != 0) die(path, "write failed");
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: nnvm-run MODEL.so --info | IN.npy... -o OUT.npy... [-r N]\n");
    return 2;
  }
  model_path = argv[1];
  char local[4096];  /* dlopen searches the library path for a name without a slash: "m.so" is "./m.so" */
  if (!strchr(model_path, '/') && snprintf(local, sizeof local, "./%s", model_path) < (int)sizeof local)
    model_path = local;
  void *lib = dlopen(model_path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) die(model_path, dlerror());
  run_fn run = (run_fn)symbol(lib, "nnvm_model_run");
  int32_t n_in = *(const int32_t *)symbol(lib, "nnvm_model_num_inputs");
  int32_t n_out = *(const int32_t *)symbol(lib, "nnvm_model_num_outputs");
  const struct nnvm_tensor_info *ins = symbol(lib, "nnvm_model_inputs");
  const struct nnvm_tensor_info *outs = symbol(lib, "nnvm_model_outputs");
  if (argc == 3 && strcmp(argv[2], "--info") == 0) {
    char shape[160];
    for (int32_t i = 0; i < n_in + n_out; i++) {
      const struct nnvm_tensor_info *t = i < n_in ? &ins[i] : &outs[i - n_in];
      shape_text(t, shape, sizeof shape);
      printf("%s %s %s %s\n", i < n_in ? "input" : "output", t->name, t->descr, shape);
    }
    return 0;
  }
  int a = 2, repeat = 0;
  const void **in_data = calloc((size_t)n_in + 1, sizeof *in_data);
  void **out_data = calloc((size_t)n_out + 1, sizeof *out_data);
  const char **out_paths = calloc((size_t)n_out + 1, sizeof *out_paths);
  int32_t k = 0;
  for (; a < argc && strcmp(argv[a], "-o") != 0; a++, k++) {
    if (k >= n_in) die(argv[a], "more input files than the model has inputs");
    in_data[k] = read_npy(argv[a], &ins[k]);
  }
  if (k != n_in) die(model_path, "fewer input files than the model has inputs");
  k = 0;
  for (a++; a < argc && strcmp(argv[a], "-r") != 0; a++, k++) {
    if (k >= n_out) die(argv[a], "more output files than the model has outputs");
    out_paths[k] = argv[a];
  }
  if (k != n_out) die(model_path, "give one output file per model output after -o");
  if (a + 1 < argc) repeat = atoi(argv[a + 1]);
  for (int32_t i = 0; i < n_out; i++)
    if (!(out_data[i] = malloc(outs[i].nbytes ? outs[i].nbytes : 1))) die(model_path, "out of memory");
  int32_t rc = run(in_data, out_data);
  if (rc != 0) {
    fprintf(stderr, "nnvm-run: %s: the model failed with status %d\n", model_path, rc);
    return 1;
  }
  if (repeat > 0) {
    double *ms = calloc((size_t)repeat, sizeof *ms);
    for (int r = 0; r < repeat; r++) {
      double t0 = now_ms();
      run(in_data, out_data);
      ms[r] = now_ms() - t0;
    }
    qsort(ms, (size_t)repeat, sizeof *ms, by_value);
    printf("median %.3f ms over %d runs\n", ms[repeat / 2], repeat);
  }
  for (int32_t i = 0; i < n_out; i++) write_npy(out_paths[i], &outs[i], out_data[i]);
  return 0;
}
