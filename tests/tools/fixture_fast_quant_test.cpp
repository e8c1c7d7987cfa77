// moezip-fixture --fast-quant: q4_K and q8_0 blocks drawn directly. Determinism, validity (the
// engine's own dequantization gives finite values with the spread the reference quantizer's
// blocks have), the engine decoding such a model into varied tokens, and the time of an a3b layer.
#include "tests/support/test_support.h"
#include "tools/moezip-fixture/fixture_fast_quant.h"
#include "tools/moezip-fixture/fixture_rng.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ggml-cpu.h"

#include <chrono>
#include <cmath>
#include <sys/stat.h>
#include <set>
#include <string>
#include <vector>

using namespace moezip_test;

namespace {

/// Mean and standard deviation of values.
struct spread {
    double mean = 0, std = 0;
    bool finite = true;
};

spread spread_of(const std::vector<float> & v) {
    spread s;
    for (float x : v) { s.finite = s.finite && std::isfinite(x); s.mean += x; }
    s.mean /= (double) v.size();
    for (float x : v) s.std += ((double) x - s.mean) * ((double) x - s.mean);
    s.std = std::sqrt(s.std / (double) v.size());
    return s;
}

/// A [ne0, rows] tensor of `type` whose values have standard deviation `std` around 0.
moezip::fixture_tensor matrix(ggml_type type, int64_t ne0, int64_t rows, float std) {
    moezip::fixture_tensor t;
    t.name = "blk.0.ffn_up_exps.weight";
    t.ne[0] = ne0;
    t.ne[1] = rows;
    t.n_dims = 2;
    t.type = type;
    t.std = std;
    return t;
}

/// Dequantizes `rows` rows of `t` with the engine's to_float (ggml-cpu / ggml-quants.c).
std::vector<float> dequantize(const moezip::fixture_tensor & t, const std::vector<uint8_t> & data) {
    std::vector<float> out((size_t) t.n_elements());
    ggml_get_type_traits(t.type)->to_float(data.data(), out.data(), t.n_elements());
    return out;
}

/// The same shape quantized by the reference quantizer from uniform(-a, a) values, a = sqrt(3)*std.
std::vector<float> reference_values(const moezip::fixture_tensor & t) {
    std::vector<float> f((size_t) t.n_elements());
    uint64_t state = 12345;
    const float a = std::sqrt(3.0f) * t.std;
    for (float & x : f) x = a * ((float) (moezip::splitmix64_next(state) >> 40) / 8388608.0f - 1.0f);
    std::vector<uint8_t> q(ggml_row_size(t.type, t.ne[0]) * (size_t) t.n_rows());
    ggml_quantize_chunk(t.type, f.data(), q.data(), 0, t.n_rows(), t.ne[0], nullptr);
    return dequantize(t, q);
}

class FixtureFastQuantBlocks : public ::testing::TestWithParam<ggml_type> {};

} // namespace

// An expert matrix's row of 2048 with the std an a3b fixture gives it (1/sqrt(2048)): the blocks'
// dequantized values are finite, centred, and spread like the reference quantizer's.
TEST_P(FixtureFastQuantBlocks, DequantizeLikeTheReferenceQuantizer) {
    const float std = 1.0f / std::sqrt(2048.0f);
    const moezip::fixture_tensor t = matrix(GetParam(), 2048, 64, std);
    moezip::fixture_fast_quant gen(t, 1);
    std::vector<uint8_t> data;
    gen.next_rows(t.n_rows(), data);
    ASSERT_EQ(data.size(), ggml_row_size(t.type, t.ne[0]) * (size_t) t.n_rows());
    const spread fast = spread_of(dequantize(t, data));
    const spread ref = spread_of(reference_values(t));
    EXPECT_TRUE(fast.finite);
    EXPECT_LT(std::fabs(fast.mean), 0.05 * std) << "mean " << fast.mean;
    EXPECT_NEAR(fast.std, std, 0.15 * std);
    EXPECT_NEAR(fast.std, ref.std, 0.15 * ref.std) << "reference quantizer's std " << ref.std;
}

// Rows drawn in two calls equal rows drawn in one: the bytes do not depend on the writer's chunks.
TEST_P(FixtureFastQuantBlocks, ChunkingDoesNotChangeTheBytes) {
    const moezip::fixture_tensor t = matrix(GetParam(), 512, 10, 0.05f);
    std::vector<uint8_t> one, two;
    moezip::fixture_fast_quant a(t, 3), b(t, 3);
    a.next_rows(10, one);
    b.next_rows(3, two);
    b.next_rows(7, two);
    EXPECT_EQ(one, two);
    std::vector<uint8_t> other;
    moezip::fixture_fast_quant c(t, 4);
    c.next_rows(10, other);
    EXPECT_NE(one, other) << "another seed must give other blocks";
}

INSTANTIATE_TEST_SUITE_P(FixtureFastQuant, FixtureFastQuantBlocks, ::testing::Values(GGML_TYPE_Q4_K, GGML_TYPE_Q8_0),
                         [](const ::testing::TestParamInfo<ggml_type> & info) { return std::string(ggml_type_name(info.param)); });

TEST(FixtureFastQuant, SameSeedSameBytesOtherSeedOtherBytes) {
    const std::string dir = test_dir("fixture_fast_quant_seed");
    for (const char * name : {"a", "b", "c"}) {
        const std::string seed = std::string(name) == "c" ? "8" : "7";
        CommandResult r = run_tool("moezip-fixture", {"--preset", "small", "--type", "q4_K", "--fast-quant", "--seed", seed,
                                                      "-o", dir + "/" + name + ".gguf"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(r.out.find("q4_K (fast-quant)"), std::string::npos) << r.out;
    }
    CommandResult r = run_tool("moezip-fixture", {"--preset", "small", "--type", "q4_K", "--seed", "7", "-o", dir + "/ref.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string a = sha256_file(dir + "/a.gguf");
    ASSERT_EQ(a.size(), 64u);
    EXPECT_EQ(a, sha256_file(dir + "/b.gguf"));
    EXPECT_NE(a, sha256_file(dir + "/c.gguf"));
    EXPECT_NE(a, sha256_file(dir + "/ref.gguf")) << "--fast-quant must not write the reference quantizer's bytes";
}

// The engine decodes a fast-quant model into more than one token (activations stay finite: NaN
// logits would make every greedy pick the same id).
TEST(FixtureFastQuant, EngineDecodesVariedTokens) {
    const std::string dir = test_dir("fixture_fast_quant_decode");
    for (const char * type : {"q4_K", "q8_0"}) {
        const std::string model = dir + "/" + type + ".gguf";
        CommandResult r = run_tool("moezip-fixture", {"--preset", "small", "--type", type, "--fast-quant", "-o", model});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        r = run_command({bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "16", "-t", "1", "--json", dir + "/out.json"},
                        {}, 120);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const nlohmann::json report = nlohmann::json::parse(read_file(dir + "/out.json"), nullptr, false);
        ASSERT_TRUE(report.is_object());
        ASSERT_EQ(report["tokens"].size(), 16u);
        std::set<int> distinct;
        for (const auto & t : report["tokens"]) distinct.insert(t.get<int>());
        EXPECT_GE(distinct.size(), 4u) << type << ": " << report["tokens"].dump();
    }
}

// One Qwen3-30B-A3B layer in q4_K (354 MB) in seconds; the reference quantizer takes about 50 s of
// CPU for it. The bound leaves room for a loaded 2-core machine and a slow disk.
TEST(FixtureFastQuant, A3bLayerInQ4KTakesSeconds) {
    const std::string dir = test_dir("fixture_fast_quant_a3b");
    const std::string model = dir + "/a3b-L1.gguf";
    const auto start = std::chrono::steady_clock::now();
    CommandResult r = run_tool("moezip-fixture", {"--preset", "a3b-L4", "--n-layer", "1", "--type", "q4_K", "--fast-quant",
                                                  "-o", model});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_LT(seconds, 20.0);
    // 3 expert matrices of 128 x 768 x 2048 values, 144 bytes per 256 (block_q4_K): 339738624 bytes
    struct stat st;
    ASSERT_EQ(stat(model.c_str(), &st), 0);
    EXPECT_GT((int64_t) st.st_size, 339738624);
    remove(model.c_str());
}
