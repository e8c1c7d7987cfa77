#include "tools/model-common/writable_types.h"

#include <algorithm>
#include <strings.h>

namespace moezip {

const std::vector<ggml_type> & writable_types() {
    static const std::vector<ggml_type> types = {
        GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
        GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
        GGML_TYPE_Q6_K,
    };
    return types;
}

std::vector<std::string> writable_type_names() {
    std::vector<std::string> names;
    for (ggml_type t : writable_types()) names.push_back(ggml_type_name(t));
    return names;
}

bool is_writable_type(ggml_type type) {
    const auto & types = writable_types();
    return std::find(types.begin(), types.end(), type) != types.end();
}

bool writable_type_lookup(const std::string & name, ggml_type & out) {
    for (ggml_type t : writable_types()) {
        if (strcasecmp(name.c_str(), ggml_type_name(t)) == 0) {
            out = t;
            return true;
        }
    }
    return false;
}

} // namespace moezip
