/* nnvm-run: runs an exported nnvm module on .npy files with no Python, on the C runtime's API only.
 *
 *   nnvm-run MODEL.so --info                       inputs and outputs: name, dtype, shape
 *   nnvm-run MODEL.so IN.npy... -o OUT.npy...      run once (inputs in the model's order)
 *   nnvm-run MODEL.so IN.npy... -o OUT.npy... -r N also time N more runs, print the median in ms
 *
 * Everything about the module goes through nnvm_runtime.h (load, describe, run), so this file only
 * parses arguments and the .npy format: little-endian C-order arrays whose dtype and shape must match
 * the model's. A model with symbolic dims (--info shows them as -1) takes inputs of any shape within its
 * bounds (nnvm_module_run_shaped, which checks them) and writes each output with its actual shape.
 * `nnvm runtime build` links it statically with the runtime.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nnvm_runtime.h"

struct tensor {
  nnvm_tensor_info info;
  const char *descr; /* numpy's dtype.str */
  unsigned itemsize;
  int64_t *shape; /* info.shape, then a symbolic axis (-1) as this run has it */
  uint64_t nbytes;
};

static int symbolic; /* whether the model has a symbolic axis */

static void count_bytes(struct tensor *t) {
  t->nbytes = t->itemsize;
  for (int d = 0; d < t->info.ndim; d++) t->nbytes *= (uint64_t)(t->shape[d] < 0 ? 0 : t->shape[d]);
}

static const char *model_path;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "nnvm-run: %s: %s\n", what, detail);
  exit(1);
}

/* numpy's descr of a dtype name, and its item size. */
static const char *descr_of(const char *dtype, unsigned *size) {
  static const struct { const char *name, *descr; unsigned size; } table[] = {
      {"float32", "<f4", 4}, {"float16", "<f2", 2}, {"float64", "<f8", 8}, {"int8", "|i1", 1},
      {"uint8", "|u1", 1},   {"int16", "<i2", 2},   {"uint16", "<u2", 2},  {"int32", "<i4", 4},
      {"uint32", "<u4", 4},  {"int64", "<i8", 8},   {"uint64", "<u8", 8},  {"bool", "|b1", 1}};
  for (size_t k = 0; k < sizeof table / sizeof table[0]; k++)
    if (strcmp(table[k].name, dtype) == 0) {
      *size = table[k].size;
      return table[k].descr;
    }
  die(model_path, "the model uses a dtype nnvm-run cannot write as .npy");
  return NULL;
}

static void describe(nnvm_module *m, int i, int input, struct tensor *t) {
  if ((input ? nnvm_module_input(m, i, &t->info) : nnvm_module_output(m, i, &t->info)) != 0)
    die(model_path, nnvm_last_error());
  t->descr = descr_of(t->info.dtype, &t->itemsize);
  t->shape = calloc((size_t)t->info.ndim + 1, sizeof *t->shape);
  if (!t->shape) die(model_path, "out of memory");
  for (int d = 0; d < t->info.ndim; d++) {
    t->shape[d] = t->info.shape[d];
    if (t->shape[d] < 0) symbolic = 1;
  }
  count_bytes(t);
}

/* A Python tuple, as numpy writes shapes: "(1, 3)", "(3,)", "()". */
static void shape_text(const struct tensor *t, char *buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "(");
  for (int d = 0; d < t->info.ndim && used < n; d++)
    used += (size_t)snprintf(buf + used, n - used, d ? ", %lld" : "%lld", (long long)t->shape[d]);
  if (used < n) snprintf(buf + used, n - used, t->info.ndim == 1 ? ",)" : ")");
}

/* Reads IN.npy into a fresh buffer after checking its header against the model's input t (a symbolic
   axis takes the file's size, which the run checks). */
static void *read_npy(const char *path, struct tensor *t) {
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
  for (int d = 0; d < t->info.ndim; d++) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0 || (t->info.shape[d] >= 0 && v != t->info.shape[d]))
      die(path, "shape differs from the model's input");
    t->shape[d] = v;
    for (s = end; *s == ',' || *s == ' ' || *s == 'L'; s++) {
    }
  }
  if (*s != ')') die(path, "shape differs from the model's input (another rank)");
  free(header);
  count_bytes(t);
  void *data = malloc(t->nbytes ? t->nbytes : 1);
  if (!data || fread(data, 1, t->nbytes, f) != t->nbytes) die(path, "fewer bytes than its shape needs");
  fclose(f);
  return data;
}

static void write_npy(const char *path, const struct tensor *t, const void *data) {
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

/* Records run r's time (of `repeat`); r = -1: the median of them. */
static double ms_of_run(int r, int repeat, double ms) {
  static double *times;
  if (!times && !(times = calloc((size_t)repeat + 1, sizeof *times))) die(model_path, "out of memory");
  if (r >= 0) {
    times[r] = ms;
    return ms;
  }
  qsort(times, (size_t)repeat, sizeof *times, by_value);
  return times[repeat / 2];
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: nnvm-run MODEL.so --info | IN.npy... -o OUT.npy... [-r N]\n");
    return 2;
  }
  model_path = argv[1];
  nnvm_module *m = nnvm_module_load(model_path);
  if (!m) {
    fprintf(stderr, "nnvm-run: %s\n", nnvm_last_error());
    return 1;
  }
  int n_in = nnvm_module_num_inputs(m), n_out = nnvm_module_num_outputs(m);
  struct tensor *ins = calloc((size_t)n_in + 1, sizeof *ins), *outs = calloc((size_t)n_out + 1, sizeof *outs);
  if (!ins || !outs) die(model_path, "out of memory");
  for (int i = 0; i < n_in; i++) describe(m, i, 1, &ins[i]);
  for (int i = 0; i < n_out; i++) describe(m, i, 0, &outs[i]);
  if (argc == 3 && strcmp(argv[2], "--info") == 0) {
    char shape[160];
    for (int i = 0; i < n_in + n_out; i++) {
      const struct tensor *t = i < n_in ? &ins[i] : &outs[i - n_in];
      shape_text(t, shape, sizeof shape);
      printf("%s %s %s %s\n", i < n_in ? "input" : "output", t->info.name, t->descr, shape);
    }
    return 0;
  }
  int a = 2, repeat = 0;
  const void **in_data = calloc((size_t)n_in + 1, sizeof *in_data);
  void **out_data = calloc((size_t)n_out + 1, sizeof *out_data);
  const char **out_paths = calloc((size_t)n_out + 1, sizeof *out_paths);
  if (!in_data || !out_data || !out_paths) die(model_path, "out of memory");
  int k = 0;
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
  const int64_t **in_shapes = calloc((size_t)n_in + 1, sizeof *in_shapes);
  if (!in_shapes) die(model_path, "out of memory");
  for (int i = 0; i < n_in; i++) in_shapes[i] = ins[i].shape;
  for (int i = 0; i < n_out; i++) { /* the largest output: every symbolic dim at its upper bound */
    if (symbolic && nnvm_module_output_shape(m, i, outs[i].shape) != 0) die(model_path, nnvm_last_error());
    count_bytes(&outs[i]);
    if (!(out_data[i] = malloc(outs[i].nbytes ? outs[i].nbytes : 1))) die(model_path, "out of memory");
  }
  for (int r = 0; r <= repeat; r++) {
    double t0 = now_ms();
    int rc = symbolic ? nnvm_module_run_shaped(m, in_shapes, in_data, out_data)
                      : nnvm_module_run(m, in_data, out_data);
    if (rc != 0) die(symbolic ? model_path : "the model failed", nnvm_last_error());
    if (r == 0 && repeat > 0) continue; /* the first run is not timed */
    if (r > 0) ms_of_run(r - 1, repeat, now_ms() - t0);
  }
  if (repeat > 0) printf("median %.3f ms over %d runs\n", ms_of_run(-1, repeat, 0), repeat);
  for (int i = 0; i < n_out; i++) {
    if (symbolic && nnvm_module_output_shape(m, i, outs[i].shape) != 0) die(model_path, nnvm_last_error());
    count_bytes(&outs[i]);
    write_npy(out_paths[i], &outs[i], out_data[i]);
  }
  nnvm_module_free(m);
  return 0;
}
