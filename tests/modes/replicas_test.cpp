// Replicated experts with balanced dispatch (experts.replicas, coordinator/balance/expert_balance.h)
// under the unmodified host with real workers: whichever owner computes a slot, the logits are the
// single-node bits; both owners get work; a replica whose worker dies is covered by another owner.
#include "tests/support/cluster.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace moezip_test;
using nlohmann::json;

namespace {

// top-4 of 16 experts: every decode call has four slots to balance
const std::vector<std::string> kModel = {"--preset", "tiny", "--type", "q8_0", "--n-expert", "16", "--n-expert-used", "4"};

CommandResult run_host(const std::string & dir, const std::string & name, const std::string & model, const std::string & body) {
    std::vector<std::string> argv = {bin_path("moezip-run"), "-m", model, "-n", "32", "-b", "512", "--quiet", "--no-repack",
                                     "--json", dir + "/" + name + "-run.json", "--fixture", "128"};
    return run_preloaded(argv, write_moezip_config(dir, name, body));
}

void expect_same_logits(const std::string & dir, const std::string & a, const std::string & b) {
    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", dir + "/" + a + ".json", dir + "/" + b + ".json"});
    EXPECT_EQ(cmp.exit_code, 0) << a << " vs " << b << ": " << cmp.out << cmp.err;
    EXPECT_EQ(load_json(dir + "/" + a + "-run.json")["tokens"], load_json(dir + "/" + b + "-run.json")["tokens"]);
}

std::string worker_toml(const std::string & endpoint, const std::string & experts) {
    return "[[worker]]\nendpoint = \"" + endpoint + "\"\nexperts = \"" + experts + "\"\n";
}

TEST(Replicas, EveryExpertOnThisHostAndAWorkerGivesTheSingleNodeBitsWithBothUsed) {
    const std::string model = fixture_model(kModel);
    ASSERT_FALSE(model.empty());
    Cluster c{test_dir("replicas_both"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w.sock", ""));
    ASSERT_EQ(run_host(c.dir, "single", model, "mode = \"observe\"\n").exit_code, 0);
    const std::string body = "require_intercept = true\nmode = \"experts\"\n[experts]\nlocal = \"0-15\"\nreplicas = true\n" +
                             worker_toml(c.workers[0]->endpoint(), "0-15");
    CommandResult r = run_host(c.dir, "replicas", model, body);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_logits(c.dir, "single", "replicas");
    json rep = load_json(c.dir + "/replicas.json");
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u);
    EXPECT_GT(sum_layers(rep, "remote_slots"), 0u);
    EXPECT_GT(sum_layers(rep, "local_slots"), 0u);
    ASSERT_TRUE(rep.contains("balance")) << "the report says how the replicas were used";
    const json & b = rep["balance"];
    ASSERT_EQ(b["hosts"].size(), 2u) << b.dump();
    EXPECT_EQ(b["hosts"][0]["host"], "here");
    EXPECT_EQ(b["hosts"][1]["host"], c.workers[0]->endpoint());
    EXPECT_GT(b["hosts"][0]["replicated_slots"].get<uint64_t>(), 0u) << b.dump();
    EXPECT_GT(b["hosts"][1]["replicated_slots"].get<uint64_t>(), 0u) << b.dump();
    EXPECT_GT(b["hosts"][1]["samples_small"].get<uint64_t>(), 0u) << "decode calls measured the worker: " << b.dump();
    EXPECT_GT(b["hosts"][1]["ms_per_slot_small"].get<double>(), 0.0) << b.dump();
    EXPECT_EQ(b["balanced_calls"], b["calls"]) << "every expert has two owners: every call is a decision";
    // decode calls: the worker's slots are the first ones of the slot order, so it sent one sum
    EXPECT_GT(rep["workers"][0]["prefix_sum_replies"].get<uint64_t>(), 0u) << rep["workers"][0].dump();
    // the balancer's slot counts are what the layers and the worker's link counted
    EXPECT_EQ(b["hosts"][1]["slots"].get<uint64_t>(), rep["workers"][0]["slots"].get<uint64_t>()) << b.dump();
    EXPECT_EQ(b["hosts"][0]["slots"].get<uint64_t>() + b["hosts"][1]["slots"].get<uint64_t>(), sum_layers(rep, "slots"));
    // replicas of this host's own experts stay resident: nothing was released
    EXPECT_EQ(rep["memory"]["advised_bytes"], 0) << rep["memory"].dump();
}

TEST(Replicas, TwoOverlappingWorkersGiveTheSingleNodeBitsAndShareTheOverlap) {
    const std::string model = fixture_model(kModel);
    Cluster c{test_dir("replicas_overlap"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/a.sock", "0-11"));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/b.sock", "4-15"));
    ASSERT_EQ(run_host(c.dir, "single", model, "mode = \"observe\"\n").exit_code, 0);
    const std::string body = "require_intercept = true\nmode = \"experts\"\n[experts]\nreplicas = true\n" +
                             worker_toml(c.workers[0]->endpoint(), "0-11") + worker_toml(c.workers[1]->endpoint(), "4-15");
    CommandResult r = run_host(c.dir, "overlap", model, body);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_logits(c.dir, "single", "overlap");
    json rep = load_json(c.dir + "/overlap.json");
    EXPECT_EQ(sum_layers(rep, "local_slots"), 0u) << "this host owns nothing";
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u);
    const json & h = rep["balance"]["hosts"];
    EXPECT_EQ(h[0]["slots"], 0);
    EXPECT_GT(h[1]["replicated_slots"].get<uint64_t>(), 0u) << h.dump();
    EXPECT_GT(h[2]["replicated_slots"].get<uint64_t>(), 0u) << h.dump();
    for (const auto & w : rep["workers"]) EXPECT_GT(w["slots"].get<uint64_t>(), 0u) << w.dump();
}

TEST(Replicas, AReplicaWhoseWorkerDiesIsComputedByThisHostAsOwnerEvenWithPolicyAbort) {
    const std::string model = fixture_model(kModel);
    Cluster c{test_dir("replicas_dies"), {}};
    // it answers the first prefill layer and dies on the second (this host is faster on so tiny a
    // model: decode calls would not go there)
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w.sock", "", {{"MOEZIP_WORKER_FAULT", "exit_after=1"}}));
    ASSERT_EQ(run_host(c.dir, "single", model, "mode = \"observe\"\n").exit_code, 0);
    // this host owns every expert too: the dead worker's part is an owner's work here, not a fallback
    const std::string body = "require_intercept = true\nmode = \"experts\"\n[experts]\nlocal = \"0-15\"\nreplicas = true\n"
                             "[dispatch]\non_worker_error = \"abort\"\ntimeout_ms = 500\n" +
                             worker_toml(c.workers[0]->endpoint(), "0-15");
    CommandResult r = run_host(c.dir, "dies", model, body);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_logits(c.dir, "single", "dies");
    json rep = load_json(c.dir + "/dies.json");
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u);
    EXPECT_GT(rep["balance"]["hosts"][0]["covered_slots"].get<uint64_t>(), 0u) << rep["balance"].dump();
    EXPECT_GE(rep["workers"][0]["failures"].get<int>(), 1) << "the failure is said: " << rep["workers"][0].dump();
    EXPECT_GT(rep["errors"]["count"].get<int>(), 0);
    EXPECT_NE(c.workers[0]->wait_exit(1000), -1) << "the faulty worker exited as told";
}

TEST(Replicas, AnOverlapWorkerThatDiesLeavesItsExpertsToTheOtherOwner) {
    const std::string model = fixture_model(kModel);
    Cluster c{test_dir("replicas_other_worker"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/a.sock", ""));
    // b answers one request and dies on its second (the first prefill layer is split evenly, and an
    // owner left idle is probed within kProbeCalls calls, so a second request comes)
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/b.sock", "", {{"MOEZIP_WORKER_FAULT", "exit_after=1"}}));
    ASSERT_EQ(run_host(c.dir, "single", model, "mode = \"observe\"\n").exit_code, 0);
    const std::string body = "mode = \"experts\"\n[experts]\nreplicas = true\n[dispatch]\non_worker_error = \"local\"\ntimeout_ms = 500\n" +
                             worker_toml(c.workers[0]->endpoint(), "0-15") + worker_toml(c.workers[1]->endpoint(), "0-15");
    CommandResult r = run_host(c.dir, "other", model, body);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_logits(c.dir, "single", "other");
    json rep = load_json(c.dir + "/other.json");
    // the request it died on was computed here (policy local); every later call went to the live owner
    EXPECT_EQ(rep["workers"][1]["fallbacks"], 1) << rep["workers"][1].dump();
    EXPECT_EQ(rep["workers"][0]["fallbacks"], 0);
    EXPECT_GT(rep["workers"][0]["slots"].get<uint64_t>(), rep["workers"][1]["slots"].get<uint64_t>()) << rep["balance"].dump();
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 1u);
}

} // namespace
