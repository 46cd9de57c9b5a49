/* nnvm-kernel-timer LIBRARY KERNEL REPEAT MIN_MS BUFFER...: times one kernel of an exported library.
 *
 * The tuner's measuring step for a CPU this host cannot run (an Arm kernel under qemu-user): each
 * BUFFER is a file holding one parameter buffer's bytes. One warm-up call, then REPEAT rounds of
 * `number` calls (chosen so a round lasts about MIN_MS); prints seconds per call of each round. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int32_t (*kernel_fn)(void **);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *read_buffer(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *data = aligned_alloc(64, (size_t)((size + 63) / 64 * 64 + 64));
    if (data && fread(data, 1, (size_t)size, f) != (size_t)size) data = NULL;
    fclose(f);
    return data;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s LIBRARY KERNEL REPEAT MIN_MS BUFFER...\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    kernel_fn kernel = (kernel_fn)dlsym(lib, argv[2]);
    if (!kernel) { fprintf(stderr, "no kernel %s in %s\n", argv[2], argv[1]); return 2; }
    int repeat = atoi(argv[3]);
    double min_s = atof(argv[4]) / 1e3;
    int n = argc - 5;
    void **args = calloc((size_t)(n > 0 ? n : 1), sizeof(void *));
    for (int k = 0; k < n; k++) {
        args[k] = read_buffer(argv[5 + k]);
        if (!args[k]) { fprintf(stderr, "cannot read %s\n", argv[5 + k]); return 2; }
    }
    double start = now();
    int32_t rc = kernel(args);
    double first = now() - start;
    if (rc != 0) { fprintf(stderr, "the kernel returned status %d\n", rc); return 3; }
    long number = (long)ceil(min_s / (first > 1e-7 ? first : 1e-7));
    number = number < 1 ? 1 : number > 10000 ? 10000 : number;
    for (int r = 0; r < repeat; r++) {
        start = now();
        for (long i = 0; i < number; i++) kernel(args);
        printf("%.9e\n", (now() - start) / (double)number);
    }
    return 0;
}
