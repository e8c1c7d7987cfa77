// moezip-upcycle end to end: dense stories260K -> MoE GGUF, checked by generating with moezip-run
// (greedy tokens compared with the dense model's), by reading the written file back with the gguf
// API, and by feeding it bad input. docs/internals/upcycle.md describes the construction.
#include "tests/support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ggml.h"
#include "gguf.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <sys/stat.h>

using namespace moezip_test;

namespace {

const char * const k_stories_sha256 = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d";
const char * const k_prompt = "Once upon a time";

CommandResult upcycle(const std::vector<std::string> & args) { return run_tool("moezip-upcycle", args); }

/// Runs moezip-run greedily for 40 tokens and returns its --json report (null after a failure).
nlohmann::json run_greedy(const std::string & model, const std::string & dir, const std::string & name) {
    const std::string json_path = dir + "/" + name + ".json";
    CommandResult r = run_command({bin_path("moezip-run"), "-m", model, "-p", k_prompt, "-n", "40", "-t", "1",
                                   "--json", json_path}, {}, 120);
    if (r.exit_code != 0) {
        ADD_FAILURE() << "moezip-run -m " << model << " exited " << r.exit_code << ": " << r.err;
        return nullptr;
    }
    try {
        return nlohmann::json::parse(read_file(json_path));
    } catch (const std::exception & e) {
        ADD_FAILURE() << json_path << ": " << e.what();
        return nullptr;
    }
}

std::vector<int> tokens_of(const nlohmann::json & report) {
    if (!report.is_object() || !report.contains("tokens")) return {};
    return report["tokens"].get<std::vector<int>>();
}

/// Upcycles stories260K with `args` into dir/name.gguf; "" after a failure.
std::string upcycled(const std::string & dir, const std::string & name, const std::vector<std::string> & args) {
    const std::string dense = stories_model();
    if (dense.empty()) return "";
    const std::string out = dir + "/" + name + ".gguf";
    std::vector<std::string> all = {"-i", dense, "-o", out};
    all.insert(all.end(), args.begin(), args.end());
    CommandResult r = upcycle(all);
    if (r.exit_code != 0) {
        ADD_FAILURE() << "moezip-upcycle " << name << " exited " << r.exit_code << ": " << r.err;
        return "";
    }
    return out;
}

struct gguf_file {
    gguf_context * gguf = nullptr;
    ggml_context * data = nullptr;
    explicit gguf_file(const std::string & path) {
        gguf_init_params params = {/*no_alloc =*/ false, &data};
        gguf = gguf_init_from_file(path.c_str(), params);
    }
    ~gguf_file() {
        if (gguf) gguf_free(gguf);
        if (data) ggml_free(data);
    }
    uint32_t u32(const char * key) const {
        const int64_t id = gguf_find_key(gguf, key);
        return id >= 0 && gguf_get_kv_type(gguf, id) == GGUF_TYPE_UINT32 ? gguf_get_val_u32(gguf, id) : 0;
    }
};

/// Writes a copy of `src` with `edit` applied to the metadata and without the tensors `drop` says.
void write_variant(const std::string & src, const std::string & dst, void (*edit)(gguf_context *),
                   bool (*drop)(const char * name)) {
    gguf_file in(src);
    ASSERT_NE(in.gguf, nullptr) << src;
    gguf_context * out = gguf_init_empty();
    gguf_set_kv(out, in.gguf);
    if (edit) edit(out);
    for (int64_t id = 0; id < gguf_get_n_tensors(in.gguf); ++id) {
        const char * name = gguf_get_tensor_name(in.gguf, id);
        if (!drop || !drop(name)) gguf_add_tensor(out, ggml_get_tensor(in.data, name));
    }
    EXPECT_TRUE(gguf_write_to_file(out, dst.c_str(), false)) << dst;
    gguf_free(out);
}

bool mostly_printable_words(const std::string & text) {
    if (text.empty()) return false;
    size_t printable = 0, letters = 0;
    for (unsigned char c : text) {
        printable += (c >= 32 && c < 127) || c == '\n';
        letters += std::isalpha(c) != 0;
    }
    return printable * 10 >= text.size() * 9 && letters * 2 >= text.size();
}

} // namespace

TEST(UpcycleTool, ExactModeGivesDenseGreedyTokens) {
    const std::string dir = test_dir("upcycle_exact");
    const std::string moe = upcycled(dir, "moe8x8", {"--n-expert", "8"});
    ASSERT_FALSE(moe.empty());
    const std::vector<int> dense_tokens = tokens_of(run_greedy(stories_model(), dir, "dense"));
    const std::vector<int> moe_tokens = tokens_of(run_greedy(moe, dir, "moe"));
    ASSERT_EQ(dense_tokens.size(), 40u);
    EXPECT_EQ(moe_tokens, dense_tokens);
}

TEST(UpcycleTool, ReplicatedTop2GivesDenseGreedyTokens) {
    const std::string dir = test_dir("upcycle_replicate");
    const std::string moe = upcycled(dir, "rep8x2", {"--experts", "replicate", "--n-expert-used", "2"});
    ASSERT_FALSE(moe.empty());
    const std::vector<int> dense_tokens = tokens_of(run_greedy(stories_model(), dir, "dense"));
    ASSERT_EQ(dense_tokens.size(), 40u);
    EXPECT_EQ(tokens_of(run_greedy(moe, dir, "moe")), dense_tokens);
}

TEST(UpcycleTool, SparseTop2GeneratesPrintableText) {
    const std::string dir = test_dir("upcycle_sparse");
    const std::string moe = upcycled(dir, "moe8x2", {"--n-expert", "8", "--n-expert-used", "2"});
    ASSERT_FALSE(moe.empty());
    const nlohmann::json report = run_greedy(moe, dir, "moe");
    ASSERT_TRUE(report.is_object());
    EXPECT_EQ(tokens_of(report).size(), 40u);
    const std::string text = report.value("text", "");
    EXPECT_TRUE(mostly_printable_words(text)) << "text: '" << text << "'";
}

TEST(UpcycleTool, SameFlagsGiveSameBytes) {
    const std::string dir = test_dir("upcycle_deterministic");
    const std::vector<std::string> flags = {"--n-expert-used", "2", "--split", "cluster", "--type", "f16"};
    const std::string a = upcycled(dir, "a", flags), b = upcycled(dir, "b", flags);
    ASSERT_FALSE(a.empty());
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(sha256_file(a), sha256_file(b));
    EXPECT_NE(sha256_file(a), k_stories_sha256);
}

TEST(UpcycleTool, WritesMoeKeysShapesAndCopiesTheRest) {
    const std::string dir = test_dir("upcycle_layout");
    const std::string moe = upcycled(dir, "moe8x2", {"--n-expert-used", "2"});
    ASSERT_FALSE(moe.empty());
    gguf_file in(stories_model()), out(moe);
    ASSERT_NE(out.gguf, nullptr);
    EXPECT_EQ(out.u32("llama.expert_count"), 8u);
    EXPECT_EQ(out.u32("llama.expert_used_count"), 2u);
    EXPECT_EQ(out.u32("llama.feed_forward_length"), 22u);  // ceil(172 / 8): the per-expert width
    for (int64_t id = 0; id < gguf_get_n_kv(in.gguf); ++id) {  // every input key kept, same type
        const char * key = gguf_get_key(in.gguf, id);
        const int64_t out_id = gguf_find_key(out.gguf, key);
        ASSERT_GE(out_id, 0) << key;
        EXPECT_EQ(gguf_get_kv_type(out.gguf, out_id), gguf_get_kv_type(in.gguf, id)) << key;
    }
    const ggml_tensor * exps = ggml_get_tensor(out.data, "blk.4.ffn_down_exps.weight");
    ASSERT_NE(exps, nullptr);
    EXPECT_EQ(exps->ne[0], 22);
    EXPECT_EQ(exps->ne[1], 64);
    EXPECT_EQ(exps->ne[2], 8);
    EXPECT_EQ(ggml_get_tensor(out.data, "blk.0.ffn_up.weight"), nullptr);
    EXPECT_NE(ggml_get_tensor(out.data, "blk.0.ffn_gate_inp.weight"), nullptr);
    for (int64_t id = 0; id < gguf_get_n_tensors(in.gguf); ++id) {  // every other tensor copied byte for byte
        const ggml_tensor * t = ggml_get_tensor(in.data, gguf_get_tensor_name(in.gguf, id));
        if (strstr(ggml_get_name(t), "ffn_") && !strstr(ggml_get_name(t), "ffn_norm")) continue;
        const ggml_tensor * copy = ggml_get_tensor(out.data, ggml_get_name(t));
        ASSERT_NE(copy, nullptr) << ggml_get_name(t);
        ASSERT_EQ(ggml_nbytes(copy), ggml_nbytes(t)) << ggml_get_name(t);
        EXPECT_EQ(memcmp(copy->data, t->data, ggml_nbytes(t)), 0) << ggml_get_name(t) << " changed";
    }
}

TEST(UpcycleTool, RejectsNonGgufInputNamingTheFile) {
    const std::string dir = test_dir("upcycle_not_gguf");
    const std::string bad = dir + "/not-a-model.gguf";
    std::ofstream(bad) << "this is a text file, not a model\n";
    CommandResult r = upcycle({"-i", bad, "-o", dir + "/out.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("not a GGUF file"), std::string::npos) << r.err;
    struct stat st;
    EXPECT_NE(stat((dir + "/out.gguf").c_str(), &st), 0) << "no output file after an error";
}

TEST(UpcycleTool, RejectsTruncatedInputNamingTheFile) {
    const std::string dense = stories_model();
    ASSERT_FALSE(dense.empty());
    const std::string dir = test_dir("upcycle_truncated");
    const std::string cut = dir + "/truncated.gguf";
    const std::string bytes = read_file(dense);
    std::ofstream(cut, std::ios::binary).write(bytes.data(), (std::streamsize) (bytes.size() / 2));
    CommandResult r = upcycle({"-i", cut, "-o", dir + "/out.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(cut), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
    // cut inside the header: gguf itself fails to parse
    std::ofstream(cut, std::ios::binary).write(bytes.data(), 3000);
    r = upcycle({"-i", cut, "-o", dir + "/out.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(cut + ": corrupt or truncated GGUF header"), std::string::npos) << r.err;
}

TEST(UpcycleTool, RejectsMoreUsedThanExpertsNamingTheFlag) {
    const std::string dense = stories_model();
    ASSERT_FALSE(dense.empty());
    const std::string dir = test_dir("upcycle_bad_flags");
    CommandResult r = upcycle({"-i", dense, "-o", dir + "/out.gguf", "--n-expert", "4", "--n-expert-used", "5"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("--n-expert-used"), std::string::npos) << r.err;
    r = upcycle({"-i", dense, "-o", dir + "/out.gguf", "--n-expert", "0"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("--n-expert"), std::string::npos) << r.err;
}

// The two model tools write the same tensor types and name them alike: what one rejects, the other
// rejects too, listing the same types (upcycle's list adds its "same").
TEST(UpcycleTool, UnknownTypeIsRejectedWithTheFixtureToolsTypes) {
    const std::string dense = stories_model();
    ASSERT_FALSE(dense.empty());
    const std::string dir = test_dir("upcycle_bad_type");
    CommandResult up = upcycle({"-i", dense, "-o", dir + "/out.gguf", "--type", "q9_9"});
    EXPECT_NE(up.exit_code, 0);
    const std::string up_head = "--type 'q9_9' is not one of same, ";
    const size_t up_at = up.err.find(up_head);
    ASSERT_NE(up_at, std::string::npos) << up.err;
    CommandResult fx = run_tool("moezip-fixture", {"--type", "q9_9", "-o", dir + "/x.gguf"});
    EXPECT_NE(fx.exit_code, 0);
    const std::string fx_head = "(supported: ";
    const size_t fx_at = fx.err.find(fx_head);
    ASSERT_NE(fx_at, std::string::npos) << fx.err;
    const size_t fx_end = fx.err.find(')', fx_at);
    ASSERT_NE(fx_end, std::string::npos) << fx.err;
    const std::string fixture_types = fx.err.substr(fx_at + fx_head.size(), fx_end - fx_at - fx_head.size());
    EXPECT_NE(fixture_types.find("q4_K"), std::string::npos) << fixture_types;
    EXPECT_EQ(up.err.substr(up_at + up_head.size(), fixture_types.size()), fixture_types) << up.err << "\n" << fx.err;
}

TEST(UpcycleTool, RejectsOtherArchitecturesAndMissingFfn) {
    const std::string dense = stories_model();
    ASSERT_FALSE(dense.empty());
    const std::string dir = test_dir("upcycle_not_llama");
    const std::string gpt2 = dir + "/gpt2.gguf", no_ffn = dir + "/no-ffn.gguf";
    write_variant(dense, gpt2, [](gguf_context * g) { gguf_set_val_str(g, "general.architecture", "gpt2"); }, nullptr);
    write_variant(dense, no_ffn, nullptr, [](const char * name) {
        return strstr(name, ".ffn_gate.") || strstr(name, ".ffn_up.") || strstr(name, ".ffn_down.");
    });
    CommandResult r = upcycle({"-i", gpt2, "-o", dir + "/out.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("architecture is 'gpt2', not 'llama'"), std::string::npos) << r.err;
    r = upcycle({"-i", no_ffn, "-o", dir + "/out.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("no dense FFN tensors"), std::string::npos) << r.err;
}

TEST(UpcycleTool, RejectsAnAlreadyMoeModel) {
    const std::string dir = test_dir("upcycle_twice");
    const std::string moe = upcycled(dir, "moe", {});
    ASSERT_FALSE(moe.empty());
    CommandResult r = upcycle({"-i", moe, "-o", dir + "/again.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("already a MoE model"), std::string::npos) << r.err;
}
