/* moezip build step: asks one libggml-base what it reports, through its public API only.
 *
 *   engine-probe /path/to/libggml-base.so
 *
 * Prints one line: "<ggml_version> <ggml_commit> <ggml_tensor_overhead()> <ggml_graph_overhead_custom(2048, false)>"
 * (bytes). tools/engines/engine-config.sh records it in the build's engine pin, and the ABI guard
 * (preload/abi_guard.cpp) compares a loaded engine with it at run time. Exit 1 when the library
 * cannot be loaded or lacks a symbol (the message names it). */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

int main(int argc, char ** argv) {
    if (argc != 2) { fprintf(stderr, "usage: engine-probe LIBGGML_BASE\n"); return 2; }
    void * h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) { fprintf(stderr, "engine-probe: %s\n", dlerror()); return 1; }
    const char * (*version)(void) = (const char * (*)(void)) dlsym(h, "ggml_version");
    const char * (*commit)(void) = (const char * (*)(void)) dlsym(h, "ggml_commit");
    size_t (*tensor_overhead)(void) = (size_t (*)(void)) dlsym(h, "ggml_tensor_overhead");
    size_t (*graph_overhead)(size_t, _Bool) = (size_t (*)(size_t, _Bool)) dlsym(h, "ggml_graph_overhead_custom");
    if (!version || !commit || !tensor_overhead || !graph_overhead) {
        fprintf(stderr, "engine-probe: %s lacks ggml_version, ggml_commit or an overhead function\n", argv[1]);
        return 1;
    }
    printf("%s %s %zu %zu\n", version(), commit(), tensor_overhead(), graph_overhead(2048, 0));
    return 0;
}
