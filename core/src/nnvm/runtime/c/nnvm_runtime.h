/* nnvm_runtime.h: run a module exported by nnvm (nnvm.compile(...).export(path)) from C or C++, with
 * no Python. Link libnnvm_runtime.a (or -lnnvm_runtime) plus -ldl -lpthread; the module file itself
 * loads only libc and libm (its thread pool is compiled in). `nnvm runtime build --target T -o DIR` writes this header and the libraries.
 *
 * A module is a shared library with a footer (format version, target, checksum); nnvm_module_load
 * checks it before loading any code, so a module for another CPU, a newer format or a damaged file is
 * one sentence from nnvm_last_error() and a NULL module, never a crash.
 *
 * Tensors are dense C-order arrays; dtype is numpy's name ("float32", "int64", ...). Inputs and
 * outputs are passed in the order nnvm_module_input/output list them. nnvm_module_run may be called
 * from several threads at once on the same module: each concurrent call gets its own activation
 * memory, the weights are shared and read-only. Parallel loops inside kernels run on the module's own
 * thread pool, one loop at a time (a concurrent caller runs its loop on its own thread);
 * NNVM_NUM_THREADS (else OMP_NUM_THREADS, else the CPU count) sets its size.
 */
#ifndef NNVM_RUNTIME_H
#define NNVM_RUNTIME_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NNVM_RUNTIME_FORMAT_VERSION 4 /* the newest module format this runtime reads (3: no symbolic dims) */

typedef struct nnvm_module nnvm_module;
typedef struct {
  const char *name;
  const char *dtype;
  int ndim;
  const int64_t *shape;
} nnvm_tensor_info;

nnvm_module *nnvm_module_load(const char *path); /* NULL on failure; nnvm_last_error() says why */
const char *nnvm_last_error(void);               /* the calling thread's last error */
int nnvm_module_num_inputs(const nnvm_module *m);
int nnvm_module_num_outputs(const nnvm_module *m);
int nnvm_module_input(const nnvm_module *m, int i, nnvm_tensor_info *info); /* 0, or -1 */
int nnvm_module_output(const nnvm_module *m, int i, nnvm_tensor_info *info);
int nnvm_module_run(nnvm_module *m, const void *const *inputs, void *const *outputs); /* 0, or -1; thread-safe */
void nnvm_module_free(nnvm_module *m);

/* Modules with symbolic dims (nnvm.compile(..., bounds={"seq": (1, 512)}), exported as format v4): one
 * module runs every input shape within the bounds. nnvm_module_input/output give -1 for a symbolic axis.
 * input_shapes[i] points at input i's ndim sizes; each dim is read from the inputs, checked against its
 * bounds and against the other inputs carrying it (a mismatch is one sentence naming the input and the
 * dim, and -1). Outputs must hold the largest output: nnvm_module_output_shape before any run gives it
 * (every dim at its upper bound). A module without symbolic dims runs here too, with its own shapes.
 * Thread-safe as nnvm_module_run. */
int nnvm_module_run_shaped(nnvm_module *m, const int64_t *const *input_shapes, const void *const *inputs,
                           void *const *outputs); /* 0, or -1 */
/* Output i's shape (its ndim sizes) after the last run of m to finish (any thread's: threads running one
 * module at once know their outputs' shapes from their inputs); before any run, the largest. 0, or -1. */
int nnvm_module_output_shape(const nnvm_module *m, int i, int64_t *shape);

#ifdef __cplusplus
}
#endif

#endif /* NNVM_RUNTIME_H */
