/* temper's step runner: a model's kernel calls, in plan order, in one call from the loader.
 *
 * Linked into every lib.so beside parallel.c and workspace.c. A Python loop over the plan pays an
 * interpreter step and a foreign call per kernel; a network of a hundred small kernels (the mobile
 * architectures, a small transformer) spends a measurable part of its run there. The loader
 * (compiler/runtime/module.py) builds the two arrays once: each step's kernel and its argument
 * array, whose pointers it rebinds in place for each run's inputs and outputs.
 */
#include <stdint.h>

#define API __attribute__((visibility("default")))

typedef int32_t (*temper_kernel)(void **args);

/* Runs kernels[0..count) on args[i] in order and stops at the first that fails: returns the
 * index of that step (its code in *code), or count with *code = 0 when every kernel succeeded. */
API int64_t temper_run_steps(int64_t count, const temper_kernel *kernels, void **const *args, int32_t *code) {
    for (int64_t i = 0; i < count; ++i) {
        int32_t c = kernels[i](args[i]);
        if (c != 0) {
            *code = c;
            return i;
        }
    }
    *code = 0;
    return count;
}
