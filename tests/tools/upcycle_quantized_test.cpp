// moezip-upcycle on a quantized dense model: stories260K converted to q8_0 by
// `--experts none --type q8_0` (llama-quantize's rules), then upcycled with the default
// `--type same`, whose experts keep the dense tensors' types and so the dense model's text.
#include "tests/support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ggml.h"
#include "gguf.h"

#include <cstring>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace moezip_test;

namespace {

// Prompts whose greedy continuations the tests compare (100 tokens each).
const char * const k_prompts[] = {"Once upon a time", "The little dog", "Tom and Sue went", "She was sad because",
                                  "One day, a big"};

CommandResult upcycle(const std::vector<std::string> & args) { return run_tool("moezip-upcycle", args); }

/// dir/name.gguf from `input` with `args`; "" after a failure recorded in the test.
std::string write_model(const std::string & input, const std::string & dir, const std::string & name,
                        const std::vector<std::string> & args) {
    const std::string out = dir + "/" + name + ".gguf";
    std::vector<std::string> all = {"-i", input, "-o", out};
    all.insert(all.end(), args.begin(), args.end());
    CommandResult r = upcycle(all);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    return r.exit_code == 0 ? out : "";
}

/// Greedy tokens of `model` for each prompt, 100 per prompt.
std::vector<std::vector<int>> greedy_tokens(const std::string & model, const std::string & dir) {
    std::vector<std::vector<int>> out;
    const std::string json_path = dir + "/greedy.json";
    for (const char * prompt : k_prompts) {
        CommandResult r = run_command({bin_path("moezip-run"), "-m", model, "-p", prompt, "-n", "100", "--no-repack",
                                       "--quiet", "--json", json_path}, {}, 120);
        EXPECT_EQ(r.exit_code, 0) << model << ": " << r.err;
        const nlohmann::json j = nlohmann::json::parse(read_file(json_path), nullptr, false);
        out.push_back(j.is_object() ? j["tokens"].get<std::vector<int>>() : std::vector<int>());
    }
    return out;
}

/// The header and data of a GGUF file.
struct gguf_model {
    gguf_context * g = nullptr;
    ggml_context * data = nullptr;
    explicit gguf_model(const std::string & path) {
        gguf_init_params params = {/*no_alloc =*/ false, &data};
        g = gguf_init_from_file(path.c_str(), params);
    }
    ~gguf_model() {
        if (g) gguf_free(g);
        if (data) ggml_free(data);
    }
    const ggml_tensor * tensor(const std::string & name) const { return ggml_get_tensor(data, name.c_str()); }
    std::string type_of(const std::string & name) const {
        const ggml_tensor * t = tensor(name);
        return t ? ggml_type_name(t->type) : "absent";
    }
};

/// The q8_0 dense model, written once per test run into dir.
std::string q8_dense(const std::string & dir) {
    const std::string dense = stories_model();
    return dense.empty() ? "" : write_model(dense, dir, "dense-q8_0", {"--experts", "none", "--type", "q8_0"});
}

} // namespace

TEST(UpcycleQuantized, DenseModelIsConvertedByLlamaQuantizeRules) {
    const std::string dir = test_dir("upcycle_q8_dense");
    const std::string q8 = q8_dense(dir);
    ASSERT_FALSE(q8.empty());
    gguf_model m(q8);
    ASSERT_NE(m.g, nullptr);
    EXPECT_EQ(m.type_of("token_embd.weight"), "q8_0");
    EXPECT_EQ(m.type_of("blk.0.attn_q.weight"), "q8_0");
    EXPECT_EQ(m.type_of("blk.0.ffn_gate.weight"), "q8_0");
    EXPECT_EQ(m.type_of("blk.0.ffn_down.weight"), "f16") << "ne0 172 is no multiple of 32: llama-quantize's f16 fallback";
    EXPECT_EQ(m.type_of("blk.0.attn_norm.weight"), "f32") << "norms are never quantized";
    EXPECT_LT(gguf_find_key(m.g, "llama.expert_count"), 0) << "still a dense model";
    const std::vector<std::vector<int>> tokens = greedy_tokens(q8, dir);
    EXPECT_EQ(tokens[0].size(), 100u);
}

TEST(UpcycleQuantized, ExactAndReplicatedUpcyclesGiveTheQ8DenseText) {
    const std::string dir = test_dir("upcycle_q8_text");
    const std::string q8 = q8_dense(dir);
    ASSERT_FALSE(q8.empty());
    const std::string exact = write_model(q8, dir, "exact", {});
    const std::string rep = write_model(q8, dir, "rep8x2", {"--experts", "replicate", "--n-expert-used", "2"});
    ASSERT_FALSE(exact.empty() || rep.empty());
    gguf_model e(exact), d(q8);
    ASSERT_NE(e.g, nullptr);
    EXPECT_EQ(e.type_of("blk.0.ffn_gate_exps.weight"), "q8_0");
    EXPECT_EQ(e.type_of("blk.0.ffn_up_exps.weight"), "q8_0");
    EXPECT_EQ(e.type_of("blk.0.ffn_down_exps.weight"), "f16");
    // the gate and up rows of the experts are the dense rows, byte for byte (a dequantized q8_0 row
    // quantizes back to the same blocks): contiguous split, expert e holds units 22e.. (4 of 22, 4 of 21)
    for (const char * w : {"gate", "up"}) {
        const ggml_tensor * dense = d.tensor(std::string("blk.3.ffn_") + w + ".weight");
        const ggml_tensor * exps = e.tensor(std::string("blk.3.ffn_") + w + "_exps.weight");
        ASSERT_TRUE(dense && exps);
        int64_t unit = 0;
        for (int64_t x = 0; x < 8; ++x) {
            for (int64_t r = 0; r < (x < 4 ? 22 : 21); ++r, ++unit) {
                const char * a = (const char *) dense->data + unit * dense->nb[1];
                const char * b = (const char *) exps->data + x * exps->nb[2] + r * exps->nb[1];
                ASSERT_EQ(memcmp(a, b, dense->nb[1]), 0) << w << " unit " << unit << " expert " << x << " row " << r;
            }
        }
    }
    const std::vector<std::vector<int>> want = greedy_tokens(q8, dir);
    EXPECT_EQ(greedy_tokens(exact, dir), want) << "exact upcycle";
    EXPECT_EQ(greedy_tokens(rep, dir), want) << "replicated top-2 upcycle";
}

TEST(UpcycleQuantized, F32ExpertsOfAQ8ModelChangeItsText) {
    // The bug this guards against: f32 experts run other kernels than the q8_0 dense FFN (no
    // quantized activations), so the text drifts from the dense model's ("She was sad because":
    // from token 53 on). --type same is the default for that reason.
    const std::string dir = test_dir("upcycle_q8_f32");
    const std::string q8 = q8_dense(dir);
    ASSERT_FALSE(q8.empty());
    const std::string f32 = write_model(q8, dir, "exact-f32", {"--type", "f32"});
    ASSERT_FALSE(f32.empty());
    EXPECT_NE(greedy_tokens(f32, dir), greedy_tokens(q8, dir));
}

TEST(UpcycleQuantized, ATypeThatDoesNotFitNamesTheTensor) {
    const std::string dense = stories_model();
    ASSERT_FALSE(dense.empty());
    const std::string dir = test_dir("upcycle_type_fit");
    CommandResult r = upcycle({"-i", dense, "-o", dir + "/out.gguf", "--type", "q8_0"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("tensor blk.0.ffn_down_exps.weight: row length ne0=22 is not a multiple of 32, the block size of q8_0"),
              std::string::npos) << r.err;
    struct stat st;
    EXPECT_NE(stat((dir + "/out.gguf").c_str(), &st), 0) << "no output file after an error";
    r = upcycle({"-i", dense, "-o", dir + "/out.gguf", "--type", "q9_9"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("--type 'q9_9' is not one of same, f32, f16"), std::string::npos) << r.err;
}
