// moezip: which definition a loaded object's call to an imported function is bound to, read from
// the object's own GOT. Used at exit to tell a host whose engine bypasses moezip's hooks (a
// libllama loaded with RTLD_DEEPBIND resolves ggml's functions in its own dependencies before the
// preload) from one that simply never computed a graph: a slot still pointing into the object's
// own PLT was never bound; one bound to libggml-base instead of libmoezip.so was bypassed.
#pragma once

#include <string>

namespace moezip {

/// The path of the object that the first loaded object named `object_prefix*` calls for `symbol`
/// (its R_X86_64_JUMP_SLOT or GLOB_DAT relocation's GOT slot, as the dynamic linker filled it).
/// "" when the object is not loaded, does not import the symbol, or the slot was not bound yet
/// (lazy binding: it still points into the object itself).
std::string import_bound_to(const char * object_prefix, const char * symbol);

} // namespace moezip
