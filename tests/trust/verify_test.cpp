// Untrusted results (docs/security.md): a worker that changes a value of its result and hashes the
// changed frame (MOEZIP_WORKER_FAULT=tamper_result: what a lying worker or a man in the middle
// without CURVE does) passes every hash check; verify_every and shadow_every catch it, discard its
// result, untrust it for the run, and the output is the one a trusted run gives.
#include "tests/support/cluster.h"

#include <gtest/gtest.h>

using namespace moezip_test;
using nlohmann::json;

namespace {

const std::map<std::string, std::string> kTamper = {{"MOEZIP_WORKER_FAULT", "tamper_result"}};

CommandResult run_host(const Cluster & c, const std::string & name, const std::string & model, const std::string & body) {
    return run_preloaded({bin_path("moezip-run"), "-m", model, "--fixture", "64", "-n", "16", "--no-repack", "--quiet", "--json",
                          c.dir + "/" + name + "-run.json"}, write_moezip_config(c.dir, name, body));
}

int compare(const Cluster & c, const std::string & a, const std::string & b) {
    return run_command({bin_path("moezip-report"), "compare", c.dir + "/" + a + ".json", c.dir + "/" + b + ".json"}).exit_code;
}

std::string worker(const Cluster & c, size_t i, const std::string & key, const std::string & value) {
    return "[[worker]]\nendpoint = \"" + c.workers[i]->endpoint() + "\"\n" + key + " = " + value + "\n";
}

} // namespace

TEST(Verify, ATamperingWorkerIsCaughtWithinNResultsAndTheOutputEqualsTheSingleNodeRun) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    Cluster c{test_dir("verify_experts"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/honest.sock", "0-3"));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/liar.sock", "4-7", kTamper));
    ASSERT_EQ(run_host(c, "single", model, "mode = \"observe\"\n").exit_code, 0);
    const std::string workers = worker(c, 0, "experts", "\"0-3\"") + worker(c, 1, "experts", "\"4-7\"");

    // without verification the lie goes through: every hash matched, and the logits are not the model's
    CommandResult blind = run_host(c, "blind", model, "mode = \"experts\"\n" + workers);
    ASSERT_EQ(blind.exit_code, 0) << blind.err;
    EXPECT_EQ(compare(c, "single", "blind"), 1) << "a tampered run must differ, or this test proves nothing";
    EXPECT_EQ(load_json(c.dir + "/blind.json")["workers"][1]["hash_failed"], 0);

    // verify_every = 1: the first result is checked, the liar is untrusted, its experts are computed here
    CommandResult v1 = run_host(c, "v1", model, "verify_every = 1\nmode = \"experts\"\n" + workers);
    ASSERT_EQ(v1.exit_code, 0) << v1.err;
    EXPECT_EQ(compare(c, "single", "v1"), 0) << "the output equals the single-node run";
    const json rep = load_json(c.dir + "/v1.json");
    const json & honest = rep["workers"][0], & liar = rep["workers"][1];
    EXPECT_EQ(honest["verify"]["mismatches"], 0) << honest.dump();
    EXPECT_GT(honest["verify"]["checked"].get<int>(), 10) << "every result of the honest worker was checked, bit for bit";
    EXPECT_EQ(honest["untrusted"], "");
    EXPECT_EQ(liar["verify"]["mismatches"], 1) << liar.dump();
    EXPECT_NE(liar["untrusted"].get<std::string>().find("returned a wrong result"), std::string::npos) << liar.dump();
    EXPECT_EQ(liar["requests"], 2) << "hello and one compute, then no more work: " << liar.dump();
    EXPECT_GT(liar["fallbacks"].get<int>(), 10) << liar.dump();
    EXPECT_TRUE(errors_mention(rep, "returned a wrong result")) << rep["errors"].dump();
    EXPECT_NE(v1.err.find("returned a wrong result"), std::string::npos) << "said on stderr: " << v1.err;
    EXPECT_GT(liar["verify"]["max_abs"].get<double>(), 0.4) << "the 0.5 the fault added: " << liar.dump();
    // checks read the honest worker's experts here; they are released once per layer, not after every
    // check (that cost more than the check itself: /proc/self/maps, madvise, faults at the next one)
    EXPECT_LE(rep["memory"]["released_parts"].get<int>(), 2) << rep["memory"].dump();

    CommandResult show = run_command({bin_path("moezip-report"), "show", c.dir + "/v1.json"});
    EXPECT_NE(show.out.find("UNTRUSTED " + c.workers[1]->endpoint() + ": worker " + c.workers[1]->endpoint() + " returned a wrong result"),
              std::string::npos) << show.out;

    // verify_every = 4: one result in every 4, at a position the worker cannot predict: caught within 4
    CommandResult v4 = run_host(c, "v4", model, "verify_every = 4\nmode = \"experts\"\n" + workers);
    ASSERT_EQ(v4.exit_code, 0) << v4.err;
    const json l4 = load_json(c.dir + "/v4.json")["workers"][1];
    EXPECT_EQ(l4["verify"]["mismatches"], 1) << l4.dump();
    EXPECT_LE(l4["requests"].get<int>(), 1 + 4) << "at most 4 results before it was caught: " << l4.dump();

    // require_intercept: a worker caught lying fails the run (status 4), though the output was right
    CommandResult strict = run_host(c, "strict", model, "require_intercept = true\nmode = \"experts\"\n[dispatch]\nverify_every = 1\n" + workers);
    EXPECT_EQ(strict.exit_code, 4) << strict.err;
    EXPECT_NE(strict.err.find("returned a wrong result"), std::string::npos) << strict.err;
}

TEST(Verify, AWorkersPrefixSumsAreCheckedBitForBit) {
    // a worker owning every expert holds every slot of its rows: it replies with one sum per row (the
    // engine's whole ADD chain), and a check compares that sum exactly, not within tolerances
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    Cluster c{test_dir("verify_prefix"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/honest.sock", ""));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/liar.sock", "", kTamper));
    // one last mantissa bit off: within any tolerance, so only a bit-for-bit check sees it
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/nudger.sock", "", {{"MOEZIP_WORKER_FAULT", "nudge_result"}}));
    ASSERT_EQ(run_host(c, "single", model, "mode = \"observe\"\n").exit_code, 0);
    for (size_t i = 0; i < 3; ++i) {
        const std::string name = i == 0 ? "honest" : i == 1 ? "liar" : "nudger";
        CommandResult r = run_host(c, name, model, "verify_every = 1\nmode = \"experts\"\n" + worker(c, i, "experts", "\"0-7\""));
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(compare(c, "single", name), 0) << name << ": the output equals the single-node run";
        const json w = load_json(c.dir + "/" + name + ".json")["workers"][0];
        EXPECT_GT(w["prefix_sum_replies"].get<int>(), 0) << w.dump();
        if (i == 0) {
            EXPECT_EQ(w["verify"]["mismatches"], 0) << w.dump();
            EXPECT_EQ(w["verify"]["checked"], w["prefix_sum_replies"]) << "every sum checked, and equal bit for bit: " << w.dump();
            EXPECT_EQ(w["verify"]["max_abs"], 0.0) << w.dump();
        } else {
            EXPECT_EQ(w["verify"]["mismatches"], 1) << w.dump();
            EXPECT_NE(w["untrusted"].get<std::string>().find("returned a wrong result"), std::string::npos) << w.dump();
        }
    }
}

TEST(Verify, RowsShardAndPartialCombineAreVerifiedAndShadowChecksAct) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    Cluster c{test_dir("verify_modes"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/all.sock", ""));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/all-liar.sock", "", kTamper));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/low.sock", "0-3"));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/high-liar.sock", "4-7", kTamper));
    ASSERT_EQ(run_host(c, "single", model, "mode = \"observe\"\n").exit_code, 0);

    // rows: every row is bit-identical to the engine's, so the comparison is bit for bit
    CommandResult rows = run_host(c, "rows", model, "mode = \"rows\"\nverify_every = 1\n[rows]\nlocal_share = 0.5\n" +
                                                        worker(c, 0, "share", "0.25") + worker(c, 1, "share", "0.25"));
    ASSERT_EQ(rows.exit_code, 0) << rows.err;
    EXPECT_EQ(compare(c, "single", "rows"), 0);
    json rep = load_json(c.dir + "/rows.json");
    EXPECT_EQ(rep["workers"][0]["verify"]["mismatches"], 0) << rep["workers"][0].dump();
    EXPECT_GT(rep["workers"][0]["verify"]["checked"].get<int>(), 0);
    EXPECT_NE(rep["workers"][1]["untrusted"], "") << rep["workers"][1].dump();

    // shard: shadow_every = 1 verifies every worker's slice before it measures the region; the
    // liar's slice computed here gives the bits an honest worker's gives
    CommandResult honest = run_host(c, "shard_honest", model, "mode = \"shard\"\n[shard]\nlocal_share = 0.5\nshadow_every = 1\n" +
                                                                  worker(c, 0, "share", "0.5"));
    ASSERT_EQ(honest.exit_code, 0) << honest.err;
    CommandResult shard = run_host(c, "shard", model, "mode = \"shard\"\n[shard]\nlocal_share = 0.5\nshadow_every = 1\n" +
                                                          worker(c, 1, "share", "0.5"));
    ASSERT_EQ(shard.exit_code, 0) << shard.err;
    EXPECT_EQ(compare(c, "shard_honest", "shard"), 0) << "the liar's slices were replaced by this host's";
    const json h = load_json(c.dir + "/shard_honest.json"), s = load_json(c.dir + "/shard.json");
    EXPECT_EQ(h["workers"][0]["verify"]["mismatches"], 0) << h["workers"][0].dump();
    EXPECT_EQ(h["workers"][0]["verify"]["max_abs"], 0.0) << "the same kernels on the same slice: the same bits";
    EXPECT_EQ(s["workers"][0]["verify"]["mismatches"], 1) << s["workers"][0].dump();
    EXPECT_NE(s["workers"][0]["untrusted"], "");
    for (const json & r : {h, s}) {
        for (const auto & w : r["workers"]) {
            if (w.contains("shadow")) {
                EXPECT_EQ(w["shadow"]["exceeded"], 0) << w.dump();
            }
        }
    }

    // experts, combine = "partial": the liar's row sums are checked against tolerances
    CommandResult partial = run_host(c, "partial", model, "mode = \"experts\"\nverify_every = 1\n[experts]\ncombine = \"partial\"\n" +
                                                              worker(c, 2, "experts", "\"0-3\"") + worker(c, 3, "experts", "\"4-7\""));
    ASSERT_EQ(partial.exit_code, 0) << partial.err;
    EXPECT_EQ(compare(c, "single", "partial"), 0) << "top-2 partial sums are exact";
    rep = load_json(c.dir + "/partial.json");
    EXPECT_EQ(rep["workers"][0]["verify"]["mismatches"], 0) << rep["workers"][0].dump();
    EXPECT_EQ(rep["workers"][1]["verify"]["mismatches"], 1) << rep["workers"][1].dump();
}
