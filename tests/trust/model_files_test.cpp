// Which model a weight belongs to (coordinator/memory/model_files.h) and the config's `model` key
// checked against the filesystem (config_check_model_file).
#include "coordinator/config/config.h"
#include "coordinator/memory/model_files.h"
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace moezip;

namespace {

// Two fake mappings: addresses inside a buffer, never dereferenced.
std::vector<char> g_space(1 << 16);
const char * at(size_t off) { return g_space.data() + off; }

// The test's directory, resolved (identities are realpaths).
std::string test_dir(const std::string & name) {
    char buf[PATH_MAX];
    const std::string d = moezip_test::test_dir(name);
    return realpath(d.c_str(), buf) ? std::string(buf) : d;
}

// Creates `path` with `bytes` and returns it.
std::string write_file(const std::string & path, const std::string & bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
}

} // namespace

TEST(ModelFiles, SplitPartsOfOneModelShareOneIdentityAndOtherNamesDoNot) {
    const std::string dir = test_dir("model_files_identity");
    const std::string p1 = write_file(dir + "/m-00001-of-00003.gguf", "GGUF"), p2 = write_file(dir + "/m-00002-of-00003.gguf", "GGUF");
    EXPECT_EQ(model_file_identity(p1), model_file_identity(p2));
    EXPECT_EQ(model_file_identity(p1), dir + "/m-*-of-00003.gguf");
    EXPECT_NE(model_file_identity(write_file(dir + "/n-00001-of-00003.gguf", "GGUF")), model_file_identity(p1));
    EXPECT_NE(model_file_identity(write_file(dir + "/m-00001-of-00004.gguf", "GGUF")), model_file_identity(p1));
    // not split names: the realpath as it is
    EXPECT_EQ(model_file_identity(write_file(dir + "/m-0001-of-00003.gguf", "GGUF")), dir + "/m-0001-of-00003.gguf");
    EXPECT_EQ(model_file_identity(dir + "/./m-00001-of-00003.gguf"), model_file_identity(p1)) << "compared by realpath";
    EXPECT_EQ(model_file_identity("/gone/x.gguf (deleted)"), "/gone/x.gguf (deleted)") << "a path that does not resolve stays as given";
}

TEST(ModelFiles, ALaterSplitPartLinkedElsewhereBelongsToTheModelMappedBeforeIt) {
    // the second part is a link to a file in another directory with another prefix (a part on
    // tmpfs): /proc/self/fd names the link's target, whose realpath alone would be another model
    const std::string dir = test_dir("model_files_split_link");
    const std::string p1 = write_file(dir + "/m-00001-of-00002.gguf", "GGUF");
    const std::string elsewhere = write_file(dir + "/shm-99-00002-of-00002.gguf", "GGUF");
    const std::string other = write_file(dir + "/x.gguf", "GGUF");
    ModelFiles f;
    f.mapped(at(0), 1000, p1);
    f.mapped(at(1000), 1000, elsewhere);
    f.mapped(at(3000), 1000, other);
    EXPECT_TRUE(f.verdict(at(1500), "").distributed) << "part 2 is the oldest model's";
    EXPECT_TRUE(f.verdict(at(1500), model_file_identity(p1)).distributed) << "the config names the first part";
    EXPECT_FALSE(f.verdict(at(3500), "").distributed);
    // a first part is a model of its own, whatever was mapped before it
    const std::string q1 = write_file(dir + "/q-00001-of-00002.gguf", "GGUF");
    f.mapped(at(5000), 1000, q1);
    EXPECT_FALSE(f.verdict(at(5500), "").distributed);
}

TEST(ModelFiles, WithoutAConfiguredModelTheOldestMappedIsDistributedAndTheOtherNamed) {
    const std::string dir = test_dir("model_files_oldest");
    const std::string a = write_file(dir + "/a.gguf", "GGUF"), b = write_file(dir + "/b.gguf", "GGUF");
    ModelFiles f;
    EXPECT_TRUE(f.would_distribute(a, "")) << "nothing mapped yet";
    f.mapped(at(0), 1000, a);
    EXPECT_FALSE(f.would_distribute(b, ""));
    EXPECT_TRUE(f.would_distribute(a, "")) << "the same file again (a second llama_model of it)";
    f.mapped(at(2000), 1000, b);
    EXPECT_TRUE(f.verdict(at(10), "").distributed);
    const ModelVerdict vb = f.verdict(at(2500), "");
    EXPECT_FALSE(vb.distributed);
    EXPECT_EQ(vb.path, b);
    EXPECT_EQ(vb.reason, "not the distributed model (" + b + ")");
    const ModelVerdict none = f.verdict(at(5000), "");
    EXPECT_TRUE(none.distributed) << "weights in no mapping (--no-mmap): the workers' digests decide";
    EXPECT_EQ(none.path, "");
    // A's weight buffer freed (the model is gone): B is the oldest now and distributed
    f.released(at(100), 200);
    EXPECT_EQ(f.path_of(at(10)), "");
    EXPECT_TRUE(f.verdict(at(2500), "").distributed);
}

TEST(ModelFiles, AConfiguredModelIsDistributedWhereverItWasMapped) {
    const std::string dir = test_dir("model_files_configured");
    const std::string a = write_file(dir + "/a.gguf", "GGUF"), b = write_file(dir + "/b.gguf", "GGUF");
    ModelFiles f;
    const std::string want = model_file_identity(b);
    EXPECT_FALSE(f.would_distribute(a, want));
    f.mapped(at(0), 1000, a);
    f.mapped(at(2000), 1000, b);
    EXPECT_FALSE(f.verdict(at(10), want).distributed);
    EXPECT_TRUE(f.verdict(at(2010), want).distributed);
    EXPECT_TRUE(f.would_distribute(dir + "/./b.gguf", want)) << "by realpath";
}

TEST(ModelFiles, ANewMappingOverOldAddressesEndsTheOldRecord) {
    const std::string dir = test_dir("model_files_remap");
    const std::string a = write_file(dir + "/a.gguf", "GGUF"), b = write_file(dir + "/b.gguf", "GGUF");
    ModelFiles f;
    f.mapped(at(0), 1000, a);
    f.mapped(at(500), 1000, b);  // a was unmapped unseen and b mapped where it was
    EXPECT_EQ(f.path_of(at(10)), "");
    EXPECT_EQ(f.path_of(at(600)), b);
    EXPECT_EQ(f.oldest_identity(), model_file_identity(b));
}

TEST(ConfigModelFile, AMissingOrNonGgufFileNamesFileLineKeyAndReason) {
    const std::string dir = test_dir("config_model_file");
    Config cfg;
    ASSERT_TRUE(config_load_string("mode = \"rows\"\n\nmodel = \"" + dir + "/none.gguf\"\n", "m.toml", cfg));
    Status st = config_check_model_file(cfg);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.message(), "m.toml:3: model: \"" + dir + "/none.gguf\": No such file or directory (the GGUF file this host distributes)");

    const std::string text = write_file(dir + "/notes.gguf", "not a model");
    ASSERT_TRUE(config_load_string("model = \"" + text + "\"\n", "m.toml", cfg));
    st = config_check_model_file(cfg);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.message(), "m.toml:1: model: \"" + text + "\": not a GGUF file (no \"GGUF\" magic at its start)");

    ASSERT_TRUE(config_load_string("model = \"" + dir + "\"\n", "m.toml", cfg));
    st = config_check_model_file(cfg);
    ASSERT_FALSE(st);
    EXPECT_NE(st.message().find("not a regular file"), std::string::npos) << st.message();

    ASSERT_TRUE(config_load_string("model = \"" + write_file(dir + "/m.gguf", "GGUF\x03") + "\"\n", "m.toml", cfg));
    EXPECT_TRUE(config_check_model_file(cfg)) << "a GGUF file";
    ASSERT_TRUE(config_load_string("mode = \"rows\"\n", "m.toml", cfg));
    EXPECT_TRUE(config_check_model_file(cfg)) << "not set";
}
