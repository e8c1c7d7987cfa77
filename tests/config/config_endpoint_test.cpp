// Tests of the endpoint check (coordinator/config/config_endpoint.h) that the config file and
// `moezip-worker --bind` share: a bad endpoint is named when the config is read, not when zmq connects.
#include "coordinator/config/config.h"
#include "coordinator/config/config_endpoint.h"

#include <gtest/gtest.h>

#include <string>

using namespace moezip;

namespace {

struct EndpointCase {
    std::string endpoint;
    bool for_bind;
    const char * why;  ///< nullptr: valid; else a fragment of the reason
};

} // namespace

TEST(ConfigEndpoint, FormIsCheckedWithTheReason) {
    const std::string long_path = "/tmp/" + std::string(config_ipc_path_max - 5, 'p');  // exactly the limit
    const EndpointCase cases[] = {
        {"tcp://127.0.0.1:5601", false, nullptr},
        {"tcp://worker-3.example.org:1", false, nullptr},
        {"tcp://[::1]:65535", false, nullptr},
        {"tcp://[fe80::1%eth0]:5601", false, nullptr},
        {"tcp://*:5601", true, nullptr},
        {"tcp://127.0.0.1:*", true, nullptr},
        {"ipc://" + long_path, false, nullptr},
        {"ipc://relative.sock", false, nullptr},
        {"ipc://" + long_path + "x", false, "ipc path is 108 bytes; a Unix socket path holds at most 107"},
        {"ipc://", false, "empty ipc path"},
        {"tcp://:5601", false, "empty host"},
        {"tcp://host", false, "missing \":port\""},
        {"tcp://host:", false, "missing port after ':'"},
        {"tcp://host:0", false, "port must be 1..65535, got \"0\""},
        {"tcp://host:65536", false, "port must be 1..65535, got \"65536\""},
        {"tcp://host:0000005601", false, "port must be 1..65535"},
        {"tcp://host:56 01", false, "port must be 1..65535, got \"56 01\""},
        {"tcp://host:-1", false, "port must be 1..65535"},
        {"tcp://ho st:5601", false, "host \"ho st\" contains a space"},
        {"tcp:// host:5601", false, "contains a space"},
        {"tcp://host/x:5601", false, "contains '/'"},
        {"tcp://a;b:5601", false, "contains ';'"},
        {"tcp://::1:5601", false, "an IPv6 address needs brackets"},
        {"tcp://[::1:5601", false, "without ']'"},
        {"tcp://[::1]5601", false, "missing \":port\""},
        {"tcp://[]:5601", false, "bad IPv6 address []"},
        {"tcp://[1.2.3.4]:5601", false, "bad IPv6 address"},
        {"tcp://*:5601", false, "host \"*\" is only valid for bind"},
        {"tcp://host:*", false, "port must be 1..65535, got \"*\""},
        {"tcp://" + std::string(254, 'h') + ":1", false, "host is 254 characters, the limit is 253"},
        {std::string("tcp://a\0b:1", 11), false, "control character"},
        {"tcp://host:5601\n", false, "control character"},
        {"udp://host:5601", false, "unknown transport"},
        {"127.0.0.1:5601", false, "unknown transport"},
        {"", false, "unknown transport"},
    };
    for (const EndpointCase & c : cases) {
        std::string why;
        bool ok = config_endpoint_valid(c.endpoint, c.for_bind, why);
        if (c.why == nullptr) {
            EXPECT_TRUE(ok) << c.endpoint << ": " << why;
        } else {
            EXPECT_FALSE(ok) << c.endpoint << " was accepted";
            EXPECT_NE(why.find(c.why), std::string::npos) << c.endpoint << ": wanted \"" << c.why << "\" in: " << why;
        }
    }
}

TEST(ConfigEndpoint, ConfigNamesWorkerKeyLimitAndLength) {
    Config cfg;
    const std::string path = "/tmp/" + std::string(125, 'w') + ".sock";  // 135 bytes
    Status st = config_load_string("[[worker]]\nendpoint = \"tcp://10.0.0.2:5601\"\n[[worker]]\nendpoint = \"ipc://" + path + "\"\n",
                                   "e.toml", cfg);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("e.toml:4: worker[1].endpoint: expected \"tcp://host:port\" or \"ipc:///path\", got \"ipc://" + path +
                                "\" (ipc path is 135 bytes; a Unix socket path holds at most 107)"),
              std::string::npos) << st.message();
    // a TOML escape gives a NUL byte zmq would cut the string at
    st = config_load_string("[[worker]]\nendpoint = \"tcp://host\\u0000x:5601\"\n", "e.toml", cfg);
    EXPECT_NE(st.message().find("e.toml:2: worker[0].endpoint: "), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("control character"), std::string::npos) << st.message();
}
