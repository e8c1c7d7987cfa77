// Expert slices (tools/moezip-slice, docs/worker.md "Serving a slice"): a worker serving a file of
// only its experts gives the coordinator the same digests and the same logits as one serving the
// whole model; a slice of other experts or of another model is refused by name.
#include "tests/support/cluster.h"
#include "tests/worker/worker_fixtures.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <fcntl.h>
#include <sys/stat.h>

using namespace moezip_test;
using nlohmann::json;

namespace {

const std::vector<std::string> kTinyQ8 = {"--preset", "tiny", "--type", "q8_0"};

uint64_t file_size(const std::string & path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? (uint64_t) st.st_size : 0;
}

/// The bytes of `path` ("" when it cannot be read).
std::string file_bytes(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// Copies `in` to `out` with the value of GGUF key `key` overwritten by `value` (the bytes after the
/// key's type: a u32 as 4 bytes, a string as its u64 length and bytes, `value` of the same length).
bool patch_key(const std::string & in, const std::string & out, const std::string & key, const std::string & value) {
    std::string b = file_bytes(in);
    std::string needle(8, '\0');
    const uint64_t n = key.size();
    memcpy(&needle[0], &n, 8);
    needle += key;
    const size_t at = b.find(needle);
    if (at == std::string::npos) return false;
    size_t v = at + needle.size() + 4;  // past the type
    uint32_t type = 0;
    memcpy(&type, &b[at + needle.size()], 4);
    if (type == 8) v += 8;  // a string: its length first (kept)
    if (v + value.size() > b.size()) return false;
    b.replace(v, value.size(), value);
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f << b;
    return (bool) f;
}

/// Cuts experts `range` of `model` into `out`; the tool's result (stdout names what it wrote).
CommandResult slice(const std::string & model, const std::string & range, const std::string & out) {
    return run_tool("moezip-slice", {model, "--experts", range, "-o", out});
}

/// moezip-run on `model` (32 tokens after a 128-token prompt) under the preload with `body`.
CommandResult run_host(const std::string & dir, const std::string & name, const std::string & model, const std::string & body) {
    return run_preloaded({bin_path("moezip-run"), "-m", model, "-n", "32", "--quiet", "--no-repack", "--json",
                          dir + "/" + name + "-run.json", "--fixture", "128"},
                         write_moezip_config(dir, name, body));
}

void expect_same_logits(const std::string & dir, const std::string & a, const std::string & b) {
    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", dir + "/" + a + ".json", dir + "/" + b + ".json"});
    EXPECT_EQ(cmp.exit_code, 0) << a << " vs " << b << ": " << cmp.out << cmp.err;
    EXPECT_EQ(load_json(dir + "/" + a + "-run.json")["tokens"], load_json(dir + "/" + b + "-run.json")["tokens"]);
}

struct SliceCase {
    const char * name;
    std::vector<std::string> fixture;  // moezip-fixture flags
};

class WorkerSlice : public ::testing::TestWithParam<SliceCase> {};

// Two workers, each on a slice of its half: one cut from the model's single file and read into
// memory, one cut from the same model written as 3 split files and mapped (--mmap). The host runs
// the whole model in experts mode and must get the single node's logits bit for bit.
TEST_P(WorkerSlice, SlicesServedByWorkersGiveTheSingleNodeLogits) {
    const SliceCase sc = GetParam();
    const std::string model = fixture_model(sc.fixture);
    const std::string split = fixture_model_split(sc.fixture, 3);
    ASSERT_FALSE(model.empty());
    ASSERT_FALSE(split.empty());
    Cluster c{test_dir(std::string("worker_slice_") + sc.name), {}};
    const std::string s0 = c.dir + "/experts-0-3.gguf", s1 = c.dir + "/experts-4-7.gguf";
    CommandResult cut0 = slice(model, "0-3", s0);
    ASSERT_EQ(cut0.exit_code, 0) << cut0.err;
    EXPECT_NE(cut0.out.find("experts 0-3 of 8, 2 MoE layers"), std::string::npos) << cut0.out;
    CommandResult cut1 = slice(split, "4-7", s1);
    ASSERT_EQ(cut1.exit_code, 0) << cut1.err;
    // a slice holds only its experts: less than the experts' half of the whole file plus metadata
    EXPECT_LT(file_size(s0), file_size(model) * 6 / 10) << file_size(s0) << " of " << file_size(model);

    ASSERT_TRUE(c.start_worker(s0, "ipc://" + c.dir + "/w0.sock", ""));              // its range, without --experts
    ASSERT_TRUE(c.start_worker(s1, "ipc://" + c.dir + "/w1.sock", "4-7", {}, {"--mmap"}));
    EXPECT_NE(c.workers[0]->ready_line().find("experts 0-3 of 8"), std::string::npos) << c.workers[0]->ready_line();
    EXPECT_NE(c.workers[0]->ready_line().find(s0 + ", a slice of " + model.substr(model.rfind('/') + 1) + " (experts 0-3 of 8"),
              std::string::npos) << c.workers[0]->ready_line();
    EXPECT_NE(c.workers[1]->ready_line().find(", a slice of " + split.substr(split.rfind('/') + 1) + " (experts 4-7 of 8"),
              std::string::npos) << c.workers[1]->ready_line();

    CommandResult single = run_host(c.dir, "single", model, "mode = \"observe\"\n");
    ASSERT_EQ(single.exit_code, 0) << single.err;
    CommandResult dist = run_host(c.dir, "sliced", model, "require_intercept = true\nmode = \"experts\"\n" + worker_lines(c, {"0-3", "4-7"}));
    ASSERT_EQ(dist.exit_code, 0) << dist.err;
    expect_same_logits(c.dir, "single", "sliced");
    const json rep = load_json(c.dir + "/sliced.json");
    EXPECT_EQ(rep["checks"]["identity_failed"], 0) << rep["checks"].dump();
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u);
    EXPECT_EQ(sum_layers(rep, "remote_slots"), sum_layers(rep, "slots")) << "every slot went to a slice's worker";
    for (const auto & w : rep["workers"]) {
        if (!w.contains("endpoint")) continue;
        EXPECT_EQ(w["refused"], "") << w.dump();
        EXPECT_EQ(w["errors"], 0) << w.dump();
    }
}

INSTANTIATE_TEST_SUITE_P(Archs, WorkerSlice,
                         ::testing::Values(SliceCase{"qwen3moe_q8_0", {"--preset", "tiny", "--type", "q8_0"}},
                                           // per-expert biases (ffn_*_exps.bias) are cut with their experts
                                           SliceCase{"gpt_oss_f32", {"--preset", "tiny", "--arch", "gpt-oss"}}),
                         [](const ::testing::TestParamInfo<SliceCase> & i) { return std::string(i.param.name); });

// A slice served with --experts other than its range would name experts the file does not hold:
// the worker refuses to start, naming the slice, its range and the flag to use.
TEST(WorkerSliceRefusal, ExpertsOtherThanTheSliceRangeAreRefusedAtStart) {
    const std::string model = fixture_model(kTinyQ8);
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("worker_slice_other_range");
    const std::string s = dir + "/experts-2-5.gguf";
    ASSERT_EQ(slice(model, "2-5", s).exit_code, 0);
    for (const char * other : {"0-3", "2-4", "2-6"}) {
        CommandResult r = run_tool("moezip-worker", {"--model", s, "--bind", "ipc://" + dir + "/w.sock", "--experts", other});
        EXPECT_EQ(r.exit_code, 1) << other << ": " << r.out << r.err;
        EXPECT_NE(r.err.find("--experts " + std::string(other) + ": model " + s + " is a slice holding only experts 2-5 of 8 of " +
                             model.substr(model.rfind('/') + 1)),
                  std::string::npos)
            << r.err;
        EXPECT_NE(r.err.find("serve it with --experts 2-5"), std::string::npos) << r.err;
    }
}

// A slice of another model (same shapes, another seed) has other bytes: the coordinator's
// per-expert digest check refuses the worker, and the refusal names the slice and its source.
TEST(WorkerSliceRefusal, ASliceOfAnotherModelIsRefusedNamingTheSliceAndItsSource) {
    const std::string model = fixture_model(kTinyQ8);
    const std::string other = fixture_model({"--preset", "tiny", "--type", "q8_0", "--seed", "7"});
    ASSERT_FALSE(model.empty());
    ASSERT_FALSE(other.empty());
    Cluster c{test_dir("worker_slice_other_model"), {}};
    const std::string s = c.dir + "/other-4-7.gguf";
    ASSERT_EQ(slice(other, "4-7", s).exit_code, 0);
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w0.sock", "0-3"));
    ASSERT_TRUE(c.start_worker(s, "ipc://" + c.dir + "/w1.sock", "4-7"));
    CommandResult single = run_host(c.dir, "single", model, "mode = \"observe\"\n");
    ASSERT_EQ(single.exit_code, 0) << single.err;
    CommandResult r = run_host(c.dir, "refused", model, "mode = \"experts\"\n" + worker_lines(c, {"0-3", "4-7"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_logits(c.dir, "single", "refused");  // computed here instead: still the single node's
    const json rep = load_json(c.dir + "/refused.json");
    ASSERT_EQ(rep["workers"].size(), 2u) << rep["workers"].dump();
    EXPECT_EQ(rep["workers"][0]["refusals"], 0) << rep["workers"][0].dump();
    EXPECT_GT(rep["workers"][0]["slots"].get<uint64_t>(), 0u) << rep["workers"][0].dump();
    EXPECT_EQ(rep["workers"][1]["refusals"], 2) << "refused for each of the 2 layers: " << rep["workers"][1].dump();
    EXPECT_EQ(rep["workers"][1]["slots"], 0) << "nothing may go to a worker serving other weights: " << rep["workers"][1].dump();
    const std::string source = other.substr(other.rfind('/') + 1);
    EXPECT_TRUE(errors_mention(rep, "weights differ from this host's")) << rep["errors"].dump();
    EXPECT_TRUE(errors_mention(rep, "it serves the slice " + s + " of " + source + " (experts 4-7")) << rep["errors"].dump();
}

// A slice's keys are not trusted for content: one whose moezip.slice.experts names other experts
// than it holds (the bytes of 4-7 said to be 0-3) is refused by the coordinator's digests, and the
// run keeps the single node's logits.
TEST(WorkerSliceRefusal, ASliceWhoseRangeLiesIsRefusedAndTheLogitsStayTheSingleNodes) {
    const std::string model = fixture_model(kTinyQ8);
    ASSERT_FALSE(model.empty());
    Cluster c{test_dir("worker_slice_lying_keys"), {}};
    const std::string cut = c.dir + "/experts-4-7.gguf", other_range = c.dir + "/says-0-3.gguf";
    ASSERT_EQ(slice(model, "4-7", cut).exit_code, 0);
    ASSERT_TRUE(patch_key(cut, other_range, "moezip.slice.experts", "0-3"));
    ASSERT_TRUE(c.start_worker(other_range, "ipc://" + c.dir + "/w0.sock", ""));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w1.sock", "4-7"));
    CommandResult single = run_host(c.dir, "single", model, "mode = \"observe\"\n");
    ASSERT_EQ(single.exit_code, 0) << single.err;
    CommandResult r = run_host(c.dir, "lying", model, "mode = \"experts\"\n" + worker_lines(c, {"0-3", "4-7"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_logits(c.dir, "single", "lying");
    const json rep = load_json(c.dir + "/lying.json");
    ASSERT_EQ(rep["workers"].size(), 2u) << rep["workers"].dump();
    EXPECT_EQ(rep["workers"][0]["refusals"], 2) << "refused for each of the 2 layers: " << rep["workers"][0].dump();
    EXPECT_EQ(rep["workers"][0]["slots"], 0) << "nothing may go to a worker whose slice lies: " << rep["workers"][0].dump();
    EXPECT_GT(rep["workers"][1]["slots"].get<uint64_t>(), 0u) << rep["workers"][1].dump();
    EXPECT_TRUE(errors_mention(rep, "weights differ from this host's (another model file, or a changed or damaged copy); it serves the slice " + other_range)) << rep["errors"].dump();
}

// A slice whose moezip.slice.n_expert is not its model's expert count (kept in its metadata) is
// refused at start naming both keys: the worker would otherwise describe tensors of another shape
// and reserve memory for that many experts (2^32 - 1 of them: terabytes).
TEST(WorkerSliceRefusal, ASliceWhoseExpertCountLiesIsRefusedAtStartNamingTheKeys) {
    const std::string model = fixture_model(kTinyQ8);
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("worker_slice_lying_count");
    const std::string cut = dir + "/experts-4-7.gguf", lie = dir + "/lie.gguf";
    ASSERT_EQ(slice(model, "4-7", cut).exit_code, 0);
    for (uint32_t n : {9u, 0xFFFFFFFFu}) {
        ASSERT_TRUE(patch_key(cut, lie, "moezip.slice.n_expert", std::string(reinterpret_cast<const char *>(&n), 4)));
        for (const char * mode : {"--mmap", "--repack", "--threads"}) {
            std::vector<std::string> args = {"--model", lie, "--bind", "ipc://" + dir + "/w.sock", mode};
            if (std::string(mode) == "--threads") args.push_back("1");
            CommandResult r = run_tool("moezip-worker", args);
            EXPECT_EQ(r.exit_code, 1) << n << " " << mode << ": " << r.out << r.err;
            EXPECT_NE(r.err.find("slice " + lie + ": moezip.slice.n_expert is " + std::to_string(n) + ", but qwen3moe.expert_count is 8"),
                      std::string::npos) << n << " " << mode << ": " << r.err;
        }
    }
}

// The same request to a worker on the whole model and to one mapping a slice (--mmap: the slice's
// pages placed where the whole tensor's layout puts them) gives the same bits; a status change of
// the slice's file (chmod) makes the mapping worker hash its experts again from the file, which
// must find the digests hello_ok named (expert e in slot e - first) and go on serving.
TEST(WorkerSliceFile, AMappedSliceComputesTheWholeModelsBitsAndKeepsServingAfterAStatusChange) {
    const std::string model = tiny_model();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("worker_slice_mapped");
    const std::string s = dir + "/experts-2-5.gguf";
    ASSERT_EQ(slice(model, "2-5", s).exit_code, 0);
    WorkerProcess whole, sliced;
    ASSERT_TRUE(whole.start({"--model", model, "--bind", "ipc://" + dir + "/whole.sock", "--experts", "2-5"}, dir)) << whole.error();
    ASSERT_TRUE(sliced.start({"--model", s, "--bind", "ipc://" + dir + "/slice.sock", "--mmap"}, dir)) << sliced.error();
    ComputeRequest r = random_request(1, 3, 17, /*n_choice =*/ 4);
    for (int32_t & id : r.ids) id += 2;  // experts 2-5
    WorkerClient a(whole.endpoint(), whole.instance()), b(sliced.endpoint(), sliced.instance());
    const WorkerReply want = ask_compute(a, r);
    ASSERT_EQ(want.h.kind, (uint16_t) moezip::MsgKind::result) << want.text();
    ASSERT_GE(want.frames.size(), 1u);
    auto same = [&](const WorkerReply & got) {
        ASSERT_EQ(got.h.kind, (uint16_t) moezip::MsgKind::result) << got.text();
        ASSERT_EQ(got.frames.size(), want.frames.size());
        ASSERT_EQ(got.frames[0].size(), want.frames[0].size());
        EXPECT_EQ(memcmp(got.frames[0].data(), want.frames[0].data(), want.frames[0].size()), 0) << "the same bits";
    };
    same(ask_compute(b, r));
    ASSERT_EQ(chmod(s.c_str(), 0600), 0);
    same(ask_compute(b, r));
    EXPECT_NE(sliced.stderr_text().find("hashed again"), std::string::npos) << sliced.stderr_text();
    EXPECT_EQ(sliced.stderr_text().find("no longer has the digest"), std::string::npos) << sliced.stderr_text();
}

// A slice served with --repack (its experts copied into the CPU backend's repacked layout) computes
// the bits of a worker on the whole model with --repack, and one on the slice mapped in place is
// unchanged by bytes written into the slice after it started (the worker refuses, by name, rather
// than compute from them, also when the modification time is set back).
TEST(WorkerSliceFile, ARepackedSliceComputesTheWholeModelsRepackedBitsAndAChangedSliceIsRefused) {
    const std::string model = fixture_model(kTinyQ8);
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("worker_slice_repack");
    const std::string s = dir + "/experts-2-5.gguf";
    ASSERT_EQ(slice(model, "2-5", s).exit_code, 0);
    WorkerProcess whole, sliced, mapped;
    ASSERT_TRUE(whole.start({"--model", model, "--bind", "ipc://" + dir + "/whole.sock", "--experts", "2-5", "--repack"}, dir)) << whole.error();
    ASSERT_TRUE(sliced.start({"--model", s, "--bind", "ipc://" + dir + "/slice.sock", "--repack"}, dir)) << sliced.error();
    ASSERT_TRUE(mapped.start({"--model", s, "--bind", "ipc://" + dir + "/mapped.sock", "--mmap"}, dir)) << mapped.error();
    ComputeRequest r = random_request(1, 3, 17, /*n_choice =*/ 4);
    for (int32_t & id : r.ids) id += 2;  // experts 2-5
    WorkerClient a(whole.endpoint(), whole.instance()), b(sliced.endpoint(), sliced.instance()), m(mapped.endpoint(), mapped.instance());
    const WorkerReply want = ask_compute(a, r);
    ASSERT_EQ(want.h.kind, (uint16_t) moezip::MsgKind::result) << want.text();
    const WorkerReply got = ask_compute(b, r);
    ASSERT_EQ(got.h.kind, (uint16_t) moezip::MsgKind::result) << got.text();
    ASSERT_EQ(got.frames.size(), want.frames.size());
    ASSERT_FALSE(want.frames.empty());
    ASSERT_EQ(got.frames[0].size(), want.frames[0].size());
    EXPECT_EQ(memcmp(got.frames[0].data(), want.frames[0].data(), want.frames[0].size()), 0) << "the same bits";
    ASSERT_EQ(ask_compute(m, r).h.kind, (uint16_t) moezip::MsgKind::result);
    // the last bytes of the slice's data flipped in place (the file is the slice's tensors' bytes after
    // the header, the last tensor's experts last), and its modification time set back as it was
    struct stat before;
    ASSERT_EQ(stat(s.c_str(), &before), 0);
    {
        std::fstream f(s, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(-64, std::ios::end);
        char buf[64];
        f.read(buf, sizeof buf);
        for (char & ch : buf) ch = (char) ~ch;
        f.seekp(-64, std::ios::end);
        f.write(buf, sizeof buf);
        ASSERT_TRUE((bool) f);
    }
    const struct timespec times[2] = {before.st_atim, before.st_mtim};
    ASSERT_EQ(utimensat(AT_FDCWD, s.c_str(), times, 0), 0);
    const WorkerReply after = ask_compute(m, r);
    EXPECT_NE(after.h.kind, (uint16_t) moezip::MsgKind::result) << "a mapped slice changed on disk must not be computed from";
    EXPECT_NE(after.text().find("no longer has the digest hello_ok named"), std::string::npos) << after.text();
}

// moezip-slice refuses what it cannot cut, naming the reason.
TEST(SliceTool, RefusesRangesOutsideTheModelSeveralRangesAndSlicesOfSlices) {
    const std::string model = fixture_model(kTinyQ8);
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("slice_tool_refusals");
    CommandResult past = slice(model, "4-8", dir + "/a.gguf");
    EXPECT_EQ(past.exit_code, 1);
    EXPECT_NE(past.err.find("--experts 4-8: the model has 8 experts, 0-7"), std::string::npos) << past.err;
    CommandResult two = slice(model, "0-1,4-5", dir + "/b.gguf");
    EXPECT_EQ(two.exit_code, 1);
    EXPECT_NE(two.err.find("a slice holds one range FIRST-LAST"), std::string::npos) << two.err;
    ASSERT_EQ(slice(model, "0-3", dir + "/c.gguf").exit_code, 0);
    CommandResult again = slice(dir + "/c.gguf", "0-1", dir + "/d.gguf");
    EXPECT_EQ(again.exit_code, 1);
    EXPECT_NE(again.err.find("is itself a slice (experts 0-3 of 8"), std::string::npos) << again.err;
    CommandResult missing = slice(dir + "/none.gguf", "0-1", dir + "/e.gguf");
    EXPECT_EQ(missing.exit_code, 1);
    EXPECT_NE(missing.err.find(dir + "/none.gguf"), std::string::npos) << missing.err;
    for (const char * f : {"/a.gguf", "/b.gguf", "/d.gguf", "/e.gguf", "/a.gguf.tmp"}) EXPECT_FALSE(file_exists(dir + f)) << f;
}

// The output is renamed over and OUTPUT.tmp truncated: an output that is the model itself (by a
// symlink to it, by its own path as OUTPUT.tmp, or a later part of a split model) is refused by
// name, and the model's bytes stay as they were.
TEST(SliceTool, RefusesAnOutputThatIsTheModelOrOneOfItsParts) {
    namespace fs = std::filesystem;
    const std::string model = fixture_model(kTinyQ8);
    const std::string split = fixture_model_split(kTinyQ8, 3);
    ASSERT_FALSE(model.empty());
    ASSERT_FALSE(split.empty());
    const std::string dir = test_dir("slice_tool_output_is_model");
    // copies: a failure here must not destroy the shared fixtures
    const std::string m = dir + "/m.gguf", link = dir + "/link.gguf", tmp_named = dir + "/t.gguf.tmp";
    fs::copy_file(model, m, fs::copy_options::overwrite_existing);
    fs::copy_file(model, tmp_named, fs::copy_options::overwrite_existing);
    fs::remove(link);
    fs::create_symlink(m, link);
    const std::string want = file_bytes(model);
    ASSERT_FALSE(want.empty());

    CommandResult over = slice(link, "0-3", m);  // the model through a link, its file as the output
    EXPECT_EQ(over.exit_code, 1) << over.out;
    EXPECT_NE(over.err.find("-o " + m + ": " + m + " is the model's file " + link + " itself"), std::string::npos) << over.err;
    EXPECT_TRUE(file_bytes(m) == want) << "the model must keep its bytes";

    CommandResult trunc = slice(tmp_named, "0-3", dir + "/t.gguf");  // the model is OUTPUT.tmp
    EXPECT_EQ(trunc.exit_code, 1) << trunc.out;
    EXPECT_NE(trunc.err.find(tmp_named + " is the model's file"), std::string::npos) << trunc.err;
    EXPECT_TRUE(file_bytes(tmp_named) == want) << "the model must keep its bytes";
    EXPECT_FALSE(file_exists(dir + "/t.gguf"));

    // a split model whose second part is named as the output
    const std::string sdir = split.substr(0, split.rfind('/'));
    const std::string first = dir + "/" + split.substr(split.rfind('/') + 1);
    std::string second;
    for (const auto & e : fs::directory_iterator(sdir)) {
        const std::string name = e.path().filename().string();
        if (name.find("-of-00003.gguf") == std::string::npos || split.find(name.substr(0, name.size() - 20)) == std::string::npos) continue;
        fs::copy_file(e.path(), dir + "/" + name, fs::copy_options::overwrite_existing);
        if (name.find("-00002-of-00003.gguf") != std::string::npos) second = dir + "/" + name;
    }
    ASSERT_FALSE(second.empty());
    const std::string second_bytes = file_bytes(second);
    CommandResult part = slice(first, "0-3", second);
    EXPECT_EQ(part.exit_code, 1) << part.out;
    EXPECT_NE(part.err.find(second + " is the model's file " + second + " itself"), std::string::npos) << part.err;
    EXPECT_TRUE(file_bytes(second) == second_bytes) << "the part must keep its bytes";
}

} // namespace
