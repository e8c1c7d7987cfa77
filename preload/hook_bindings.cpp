// Where the interposed calls are bound (hook_bindings.h): a table of the calls and what is lost
// without each, read against the callers' GOTs at exit.
#include "preload/hook_bindings.h"

#include "preload/engine_locate.h"
#include "preload/import_binding.h"

namespace moezip {

namespace {

struct HookImport {
    const char * object;
    const char * symbol;
    const char * lost;  // what moezip cannot do when this call bypasses it
};

constexpr HookImport kHookImports[] = {
    {"libggml-cpu", "ggml_graph_compute", "no graph can be intercepted"},
    {"libllama", "ggml_backend_sched_graph_compute_async", "logits are not told apart by context"},
    {"libllama", "ggml_backend_buffer_free", "a freed model is not seen: weights that replace it at the same address are told "
                                             "apart by their content canary only"},
};

} // namespace

nlohmann::json hook_bindings(std::vector<std::string> & bypassed) {
    const std::string self = object_path_of(reinterpret_cast<const void *>(&hook_bindings));
    nlohmann::json j = nlohmann::json::object();
    for (const HookImport & imp : kHookImports) {
        const std::string bound = import_bound_to(imp.object, imp.symbol);
        const std::string key = std::string(imp.object) + ":" + imp.symbol;
        if (bound.empty()) j[key] = "not bound yet";
        else if (bound == self) j[key] = "moezip";
        else {
            j[key] = "bypassed: bound to " + bound;
            bypassed.push_back(std::string(imp.object) + " calls " + imp.symbol + " in " + bound + ", not in moezip's preload (" +
                               imp.lost + "; loaded with RTLD_DEEPBIND?)");
        }
    }
    return j;
}

} // namespace moezip
