#include "coordinator/base/test_fault.h"

#include <cstdlib>
#include <string>

namespace moezip {

bool test_fault(const char * name) {
    static const std::string list = [] {
        const char * v = getenv("MOEZIP_TEST_FAULT");
        return "," + std::string(v ? v : "") + ",";
    }();
    return list.find("," + std::string(name) + ",") != std::string::npos;
}

} // namespace moezip
