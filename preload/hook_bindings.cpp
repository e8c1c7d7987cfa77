// Where the interposed calls are bound (hook_bindings.h): a table of the calls and what is lost
// without each, read against the callers' GOTs at exit.
#include "preload/hook_bindings.h"

#include "preload/engine_locate.h"
#include "preload/import_binding.h"

#include <cstring>

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

nlohmann::json hook_bindings(std::vector<std::string> & bypassed, const std::string & cpu_variant_in_use) {
    const std::string self = object_path_of(reinterpret_cast<const void *>(&hook_bindings));
    nlohmann::json j = nlohmann::json::object();
    for (const HookImport & imp : kHookImports) {
        // every loaded caller: CPU backend variants may be several (the one in use, and any the host
        // loaded itself); once graphs have told which one computes, only that one counts (a variant
        // nobody calls, deep-bound to itself, is no bypass)
        std::vector<ImportBinding> callers = import_bindings(imp.object, imp.symbol);
        if (!cpu_variant_in_use.empty() && strcmp(imp.object, "libggml-cpu") == 0) {
            std::vector<ImportBinding> in_use;
            for (const ImportBinding & b : callers)
                if (b.caller == cpu_variant_in_use) in_use.push_back(b);
            if (!in_use.empty()) callers = in_use;
        }
        bool to_moezip = false;
        std::string first_bypass;  // the value names the first caller bound past the hooks
        for (const ImportBinding & b : callers) {
            if (b.bound.empty()) continue;  // lazy, never called yet
            if (b.bound == self) {
                to_moezip = true;
                continue;
            }
            const bool itself = b.bound == b.caller;
            if (first_bypass.empty()) first_bypass = "bypassed: bound to " + b.bound + (itself ? " (its own definition)" : "");
            const char * file = strrchr(b.caller.c_str(), '/');
            bypassed.push_back(std::string(file ? file + 1 : b.caller.c_str()) + " calls " + imp.symbol + " in " +
                               (itself ? "its own definition" : b.bound) + ", not in moezip's preload (" + imp.lost +
                               "; loaded with RTLD_DEEPBIND?)");
        }
        j[std::string(imp.object) + ":" + imp.symbol] = !first_bypass.empty() ? first_bypass : to_moezip ? "moezip" : "not bound yet";
    }
    return j;
}

} // namespace moezip
