/* moezip-deepbind-host: a host that loads the engine with dlopen(RTLD_DEEPBIND), as some language
 * bindings do to keep the engine's symbols apart from their own. It is not linked against the
 * engine: every function comes from dlsym. It loads a model, decodes a prompt and N steps greedily
 * and prints the generated token ids.
 *
 *   moezip-deepbind-host ENGINE_DIR MODEL.gguf [N] [--variants-too | --variants-only | --unused-variant]
 *
 * With --variants-too the CPU backend variants (libggml-cpu-*.so) are dlopened with RTLD_DEEPBIND
 * first too, so that even the backend's own call of ggml_graph_compute stays inside the engine.
 * With --variants-only only they are: libllama and libggml are loaded without RTLD_DEEPBIND and
 * meet the preload's hooks, the CPU backend's call of its own ggml_graph_compute does not.
 * With --unused-variant only the baseline variant libggml-cpu-x64.so is dlopened with RTLD_DEEPBIND
 * and the engine without: ggml picks its best variant for this CPU, which meets the hooks, and the
 * deep-bound one is loaded but never computes (unless x64 is this CPU's best).
 *
 * Exit 0 when the run finished, 1 on an engine error, 2 on bad arguments. A process whose engine
 * is bound past moezip's hooks this way cannot be distributed: the preload must say so. */
#define _GNU_SOURCE
#include "llama.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOAD(handle, name)                                                          \
    __typeof__(&name) p_##name = (__typeof__(&name)) dlsym(handle, #name);          \
    if (p_##name == NULL) { fprintf(stderr, "deepbind-host: no %s\n", #name); return 1; }

static void quiet(enum ggml_log_level level, const char * text, void * data) { (void) level; (void) text; (void) data; }

int main(int argc, char ** argv) {
    if (argc < 3) { fprintf(stderr, "usage: moezip-deepbind-host ENGINE_DIR MODEL.gguf [N] [--variants-too | --variants-only | --unused-variant]\n"); return 2; }
    const int n_predict = argc > 3 ? atoi(argv[3]) : 8;
    char path[4096];
    const int variants_only = argc > 4 && strcmp(argv[4], "--variants-only") == 0;
    const int unused_variant = argc > 4 && strcmp(argv[4], "--unused-variant") == 0;
    const int engine_flags = variants_only || unused_variant ? RTLD_NOW | RTLD_LOCAL : RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
    if (unused_variant) {
        snprintf(path, sizeof path, "%s/libggml-cpu-x64.so", argv[1]);
        if (dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) == NULL) { fprintf(stderr, "deepbind-host: %s\n", dlerror()); return 1; }
    }
    if (argc > 4 && (strcmp(argv[4], "--variants-too") == 0 || variants_only)) {
        DIR * d = opendir(argv[1]);
        struct dirent * e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, "libggml-cpu-", 12) != 0) continue;
            snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
            (void) dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);  /* some need an ISA this CPU lacks: fine */
        }
        if (d != NULL) closedir(d);
    }
    snprintf(path, sizeof path, "%s/libllama.v0.4.0.so", argv[1]);
    void * llama = dlopen(path, engine_flags);
    snprintf(path, sizeof path, "%s/libggml.v0.4.0.so", argv[1]);
    void * ggml = dlopen(path, engine_flags);
    if (llama == NULL || ggml == NULL) { fprintf(stderr, "deepbind-host: %s\n", dlerror()); return 1; }
    LOAD(ggml, ggml_backend_load_all_from_path)
    LOAD(llama, llama_log_set) LOAD(llama, llama_backend_init) LOAD(llama, llama_model_default_params)
    LOAD(llama, llama_model_load_from_file) LOAD(llama, llama_context_default_params) LOAD(llama, llama_init_from_model)
    LOAD(llama, llama_batch_get_one) LOAD(llama, llama_decode) LOAD(llama, llama_get_logits_ith)
    LOAD(llama, llama_model_get_vocab) LOAD(llama, llama_vocab_n_tokens) LOAD(llama, llama_free) LOAD(llama, llama_model_free)
    p_llama_log_set(quiet, NULL);
    p_ggml_backend_load_all_from_path(argv[1]);
    p_llama_backend_init();
    struct llama_model_params mp = p_llama_model_default_params();
    mp.use_extra_bufts = false;
    struct llama_model * model = p_llama_model_load_from_file(argv[2], mp);
    if (model == NULL) { fprintf(stderr, "deepbind-host: cannot load %s\n", argv[2]); return 1; }
    struct llama_context_params cp = p_llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = cp.n_threads_batch = 1;
    struct llama_context * ctx = p_llama_init_from_model(model, cp);
    if (ctx == NULL) { fprintf(stderr, "deepbind-host: no context\n"); return 1; }
    const int n_vocab = p_llama_vocab_n_tokens(p_llama_model_get_vocab(model));
    llama_token tok[8] = {1, 20, 30, 40, 50, 60, 70, 80};
    int n = 8;
    for (int step = 0; step < n_predict; ++step) {
        if (p_llama_decode(ctx, p_llama_batch_get_one(tok, n)) != 0) { fprintf(stderr, "deepbind-host: llama_decode failed\n"); return 1; }
        const float * logits = p_llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int t = 1; t < n_vocab; ++t) if (logits[t] > logits[best]) best = t;
        printf("%d ", best);
        tok[0] = best;
        n = 1;
    }
    printf("\n");
    p_llama_free(ctx);
    p_llama_model_free(model);
    return 0;
}
