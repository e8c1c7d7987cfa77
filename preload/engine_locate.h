// moezip: find the engine's shared objects in this process, however they were loaded.
//
// dlsym(RTLD_NEXT, ...) finds nothing in a library loaded RTLD_LOCAL (always the CPU variant;
// inside node every ggml library), so we name objects instead: dladdr on an address inside the
// object, or dl_iterate_phdr by file name, then dlopen(path, RTLD_NOLOAD) for a handle (which
// neither loads anything new nor changes the object's scope).
#pragma once

#include <string>

namespace moezip {

/// Path of the loaded object containing `addr` ("" when none).
std::string object_path_of(const void * addr);
/// Path of the first loaded object whose file name starts with `prefix` (e.g. "libggml-base"), or "".
std::string loaded_object_path(const char * prefix);
/// A handle for an already loaded object (RTLD_NOLOAD); nullptr when it is not loaded.
/// The handle holds a reference; it is never closed (the engine keeps the object loaded anyway).
void * loaded_object_handle(const std::string & path);
/// The name moezip gives the CPU backend library at `path`: "zen4" for a backend-DL variant
/// libggml-cpu-zen4.so, "default" for the single libggml-cpu.so[.N] of a default llama.cpp build,
/// else the file name.
std::string cpu_library_name(const std::string & path);
/// The GNU build-id of a loaded object as lowercase hex, "" when it has none.
std::string loaded_object_build_id(const std::string & path);

} // namespace moezip
