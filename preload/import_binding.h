// moezip: which definition a loaded object's call to an imported function is bound to, read from
// the object's own GOT. Used at exit to tell a host whose engine bypasses moezip's hooks (a
// libllama loaded with RTLD_DEEPBIND resolves ggml's functions in its own dependencies before the
// preload) from one that simply never computed a graph: a slot still pointing into the object's
// own PLT was never bound; one bound to libggml-base instead of libmoezip.so was bypassed; one bound
// to the object's own definition (a CPU backend variant dlopened with RTLD_DEEPBIND calls its own
// ggml_graph_compute) was bypassed too.
#pragma once

#include <string>
#include <vector>

namespace moezip {

/// Where one loaded object's call goes.
struct ImportBinding {
    std::string caller;  ///< the calling object's path
    std::string bound;   ///< the object the slot points into; "" = not bound yet (lazy: its own PLT)
};

/// For every loaded object named `object_prefix*` that imports `symbol` (an R_X86_64_JUMP_SLOT or
/// GLOB_DAT relocation), what its GOT slot points to, as the dynamic linker filled it: several
/// objects match when more than one CPU backend variant (libggml-cpu-*.so) is loaded. A slot that
/// holds the caller's own definition of the symbol gives bound = the caller's path.
std::vector<ImportBinding> import_bindings(const char * object_prefix, const char * symbol);

} // namespace moezip
