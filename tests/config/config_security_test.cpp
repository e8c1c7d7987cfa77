// The config's security keys (docs/config.md, docs/security.md): CURVE key pairs of [[worker]] and
// [worker_server], verification, the worker's budget. One fixture per bad case in
// fixtures/config/security/, named for its error, and one good file with every key.
#include "coordinator/config/config.h"
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <dirent.h>

#include <set>

using namespace moezip;

namespace {

std::string fixture(const std::string & name) { return moezip_test::repo_root() + "/fixtures/config/security/" + name; }

struct BadCase {
    const char * file;
    const char * line;
    const char * key;
    const char * fragment;
};

const BadCase bad_cases[] = {
    {"bad_public_key.toml", "6", "worker[0].public_key", "expected the worker's CURVE public key (40 Z85 characters"},
    {"public_key_without_client_key.toml", "6", "worker[0].public_key", "needs client_key (this host's key file"},
    {"client_key_without_public_key.toml", "6", "worker[0].client_key", "needs public_key"},
    {"verify_every_twice.toml", "1", "verify_every", "written both at top level and in [dispatch] (line 4)"},
    {"server_key_without_allow.toml", "4", "worker_server.allow", "required with worker_server.key"},
    {"allow_not_paths.toml", "3", "worker_server.allow", "expected a path or an array of paths"},
};

} // namespace

TEST(ConfigSecurity, EachBadFixtureNamesItsLineAndKey) {
    for (const BadCase & c : bad_cases) {
        Config cfg;
        Status st = config_load_file(fixture(c.file), cfg);
        ASSERT_FALSE(st.is_ok()) << c.file << " was accepted";
        const std::string head = std::string(c.file) + ":" + c.line + ": " + c.key + ": ";
        EXPECT_NE(st.message().find(head), std::string::npos) << c.file << ": wanted \"" << head << "\" in:\n" << st.message();
        EXPECT_NE(st.message().find(c.fragment), std::string::npos) << c.file << ": wanted \"" << c.fragment << "\" in:\n" << st.message();
    }
}

TEST(ConfigSecurity, EveryKeyIsReadResolvedAndDescribedWithoutASecret) {
    Config cfg;
    Status st = config_load_file(fixture("keys.toml"), cfg);
    ASSERT_TRUE(st) << st.to_string();
    EXPECT_EQ(cfg.dispatch.verify_every, 100);
    EXPECT_EQ(cfg.dispatch.verify_max_abs, 0.001);
    EXPECT_EQ(cfg.dispatch.verify_min_cosine, 0.9999);
    ASSERT_EQ(cfg.workers.size(), 2u);
    EXPECT_EQ(cfg.workers[0].client_key, "/etc/moezip/coordinator/moezip.key") << "[dispatch]'s client_key by default";
    EXPECT_EQ(cfg.workers[1].client_key, "/etc/moezip/other/moezip.key") << "a worker's own wins";
    EXPECT_EQ(cfg.workers[0].public_key, "rq]*=CN@:y9t]+!0fA3aJ(V0#@xtJ(bE=^+O}Ic5");
    EXPECT_EQ(cfg.worker_server.allow, (std::vector<std::string>{"/etc/moezip/a.pub", "/etc/moezip/b.pub"}));
    EXPECT_EQ(cfg.worker_server.max_rows, 2048);
    EXPECT_EQ(cfg.worker_server.max_scratch_mib, 512);
    EXPECT_EQ(cfg.worker_server.scratch_hold_ms, 5000);
    EXPECT_EQ(cfg.worker_server.max_slots, 32768) << "defaults stay";
    EXPECT_EQ(cfg.worker_server.handshake_ms, 2000);
    const std::string d = config_describe(cfg);
    EXPECT_NE(d.find("dispatch.verify_every = 100\n"), std::string::npos) << d;
    EXPECT_NE(d.find("worker[1].client_key = \"/etc/moezip/other/moezip.key\"\n"), std::string::npos) << d;
    EXPECT_NE(d.find("worker_server.allow = [\"/etc/moezip/a.pub\", \"/etc/moezip/b.pub\"]\n"), std::string::npos) << d;
    // the same settings written elsewhere: [dispatch] verify_every instead of the top level
    Config moved;
    std::string text = moezip_test::read_file(fixture("keys.toml"));
    text.replace(text.find("verify_every = 100\n"), 19, "");
    text.insert(text.find("[dispatch]\n") + 11, "verify_every = 100\n");
    ASSERT_TRUE(config_load_string(text, "moved.toml", moved));
    EXPECT_EQ(config_digest(moved), config_digest(cfg));
}

TEST(ConfigSecurity, EveryFixtureIsCoveredByATest) {
    std::set<std::string> known = {"keys.toml"};
    for (const BadCase & c : bad_cases) known.insert(c.file);
    DIR * d = opendir((moezip_test::repo_root() + "/fixtures/config/security").c_str());
    ASSERT_NE(d, nullptr);
    int n = 0;
    while (dirent * e = readdir(d)) {
        const std::string name = e->d_name;
        if (name.size() < 5 || name.substr(name.size() - 5) != ".toml") continue;
        ++n;
        EXPECT_TRUE(known.count(name)) << name << " is in fixtures/config/security/ but no test names it";
    }
    closedir(d);
    EXPECT_EQ(n, (int) known.size());
}
