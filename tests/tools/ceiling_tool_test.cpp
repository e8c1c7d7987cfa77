// moezip-ceiling (tools/moezip-ceiling) and make bench's use of it (tools/bench/ceiling.js,
// ceiling-args.js, floor.js): the simulated step sends a decode call's bytes; the tool runs a host
// and a worker process per transport (ZeroMQ, plain TCP) and reports every split with the Amdahl
// bound of its shape; the bench reads a run's flags from a local decode phase run and holds
// the experts variants to the whole-slot ceiling. Speeds are not asserted here (make bench measures).
#include "tests/support/test_support.h"
#include "coordinator/wire/protocol.h"
#include "tools/moezip-ceiling/decode_sim.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sys/stat.h>

using namespace moezip_test;
using nlohmann::json;

namespace {

/// Runs a node snippet with the repository's tools/bench on argv[1]; its stdout parsed as JSON.
json node_json(const std::string & script, const std::string & arg) {
    CommandResult r = run_command({"node", "-e", script, repo_root() + "/tools/bench", arg}, {}, 60);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? json::parse(r.out) : json();
}

/// A link that records what the step sends and answers at once.
class RecordingLink : public moezip_ceiling::HostLink {
  public:
    explicit RecordingLink(std::vector<moezip_ceiling::SimHeader> & sent) : sent_(sent) {}
    void send(const moezip_ceiling::SimHeader & h, const std::vector<char> & payload) override {
        EXPECT_EQ(payload.size(), h.in_bytes);
        sent_.push_back(h);
    }
    void recv(moezip_ceiling::Wait) override { ++replies; }
    int replies = 0;

  private:
    std::vector<moezip_ceiling::SimHeader> & sent_;
};

} // namespace

// A decode call's bytes (docs/history/bench-runs.md "Wire"): a 152-byte header as moezip's MsgHeader, the
// row's hidden state [n_embd] f32 with n_used ids (i32) and weights (f32); back, one [n_embd] f32
// output per worker slot. With 8 slots and the host taking 4.25, the worker computes 3.75 slots'
// time and returns 4 outputs; one node sends nothing.
TEST(CeilingTool, TheSimulatedStepSendsADecodeCallsBytesPerLayer) {
    using namespace moezip_ceiling;
    static_assert(sizeof(SimHeader) == sizeof(moezip::MsgHeader), "the simulated header is moezip's size");
    StepShape shape;
    shape.n_layers = 3;
    shape.n_used = 8;
    shape.n_embd = 64;
    shape.slot_ms = 0.001;
    shape.non_moe_ms = 0.001;
    std::vector<SimHeader> sent;
    auto link = std::make_unique<RecordingLink>(sent);
    RecordingLink * rec = link.get();
    HostSim host(shape, std::move(link));
    host.step(Split{8, Wait::block, true});
    EXPECT_TRUE(sent.empty());
    host.step(Split{4.25, Wait::spin});
    ASSERT_EQ(sent.size(), 3u);
    EXPECT_EQ(rec->replies, 3);
    for (const SimHeader & h : sent) {
        EXPECT_EQ(h.stop, 0u);
        EXPECT_EQ(h.in_bytes, 64u * 4 + 8u * 4 + 8u * 4);
        EXPECT_EQ(h.out_bytes, 4u * 64 * 4);
        EXPECT_NEAR(h.compute_ms, 3.75 * 0.001, 1e-12);
    }
    host.stop_worker();
    EXPECT_EQ(sent.back().stop, 1u);
}

TEST(CeilingTool, ReportsEverySplitOfEveryTransportWithTheBoundOfItsShapeAndStopsItsWorkers) {
    // p = 0.5: one node's step is twice its MoE, the bound 1 / (0.5 + 0.25) (Amdahl's bound for two hosts)
    auto r = run_tool("moezip-ceiling", {"--slot-ms", "0.02", "--moe-share", "0.5", "--layers", "2", "--n-used", "8",
                                         "--n-embd", "64", "--rounds", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out);
    EXPECT_EQ(j["schema"], "moezip-ceiling/1");
    EXPECT_NEAR(j["amdahl_bound"].get<double>(), 1 / (0.5 + 0.25), 1e-9);
    EXPECT_NEAR(j["shape"]["non_moe_ms"].get<double>(), 2 * 8 * 0.02, 1e-9);
    for (const char * transport : {"zeromq", "zeromq_poll", "tcp_block", "tcp_busy_poll"}) {
        SCOPED_TRACE(transport);
        ASSERT_TRUE(j.contains(transport));
        const json & t = j[transport];
        EXPECT_EQ(t["worker_exit"], 0);
        EXPECT_GT(t["rtt16_ms"].get<double>(), 0);
        EXPECT_GT(t["one_node_step_ms"].get<double>(), 2 * 2 * 8 * 0.02 * 0.99);  // the spins alone take that long
        // host shares 2, 2.25, ..., 6 slots of 8, each waited for both ways
        const json & splits = t["splits"];
        ASSERT_EQ(splits.size(), 34u);
        EXPECT_EQ(splits.front()["host_slots"], 2.0);
        EXPECT_EQ(splits.back()["host_slots"], 6.0);
        double best = 0, best_whole = 0;
        for (const json & s : splits) {
            const double x = s["speedup"];
            EXPECT_NEAR(x, t["one_node_step_ms"].get<double>() / s["step_ms"].get<double>(), 1e-9);
            EXPECT_NEAR(s["of_bound"].get<double>(), x / j["amdahl_bound"].get<double>(), 1e-9);
            EXPECT_TRUE(s["wait"] == "block" || s["wait"] == "spin") << s.dump();
            best = std::max(best, x);
            if (s["host_slots"].get<double>() == std::floor(s["host_slots"].get<double>())) best_whole = std::max(best_whole, x);
        }
        EXPECT_EQ(t["best"]["speedup"].get<double>(), best);
        EXPECT_EQ(t["best_whole_slots"]["speedup"].get<double>(), best_whole);
    }

    auto one = run_tool("moezip-ceiling", {"--slot-ms", "0.02", "--rounds", "1", "--transports", "zeromq"});
    ASSERT_EQ(one.exit_code, 0) << one.err;
    json o = json::parse(one.out);
    EXPECT_TRUE(o.contains("zeromq"));
    EXPECT_FALSE(o.contains("zeromq_poll"));
    EXPECT_FALSE(o.contains("tcp_block"));
    EXPECT_FALSE(o.contains("tcp_busy_poll"));
}

TEST(CeilingTool, BadFlagsAreRefusedByNameBeforeAnyMeasuring) {
    auto r = run_tool("moezip-ceiling", {"--slot-ms", "0.02", "--moe-share", "1.5"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("--moe-share"), std::string::npos) << r.err;
    auto t = run_tool("moezip-ceiling", {"--slot-ms", "0.02", "--transports", "rdma"});
    EXPECT_NE(t.exit_code, 0);
    EXPECT_NE(t.err.find("--transports"), std::string::npos) << t.err;
    auto twice = run_tool("moezip-ceiling", {"--slot-ms", "0.02", "--transports", "zeromq,zeromq"});
    EXPECT_EQ(twice.exit_code, 1);
    EXPECT_NE(twice.err.find("zeromq is named twice"), std::string::npos) << twice.err;
    auto cpu = run_tool("moezip-ceiling", {"--slot-ms", "0.02", "--host-cpu", "-7"});
    EXPECT_NE(cpu.exit_code, 0);
    EXPECT_NE(cpu.err.find("--host-cpu"), std::string::npos) << cpu.err;
    // an unwritable --out is refused before the measurement, not after it
    auto out = run_tool("moezip-ceiling", {"--slot-ms", "0.02", "--rounds", "100000", "--max-minutes", "1440", "--out", "/nonexistent/x.json"}, 20);
    EXPECT_EQ(out.exit_code, 1);
    EXPECT_NE(out.err.find("--out: cannot write /nonexistent/x.json"), std::string::npos) << out.err;
}

// A shape that measures for hours was taken and ran with no word of its length.
TEST(CeilingTool, ARunLongerThanMaxMinutesIsRefusedWithItsLengthBeforeMeasuring) {
    // 1 layer, top-2: splits_to_try gives one node (2 slots) and one slot each way with both waits;
    // slot 1 ms, p 0.5 so the rest of a step is 2 ms: 4 + 3 + 3 = 10 ms a round, 10 rounds with the
    // 3 untimed ones, on 2 transports
    moezip_ceiling::StepShape s;
    s.n_layers = 1;
    s.n_used = 2;
    s.slot_ms = 1;
    s.non_moe_ms = 2;
    // and the bytes of the two worker calls at 10 GB/s: 2 headers of 152 + 4000 of hidden state + 16
    // of ids and weights + one 4000-byte slot output = 8320 bytes, 0.000832 ms, in 10 rounds x 2
    // transports
    s.n_embd = 1000;
    EXPECT_NEAR(moezip_ceiling::run_floor_ms(s, 7, 2), 200.0 + 2 * 0.000832 * 10 * 2, 1e-9);
    auto r = run_tool("moezip-ceiling", {"--layers", "512", "--n-embd", "65536", "--slot-ms", "1", "--out", test_dir("ceiling_long") + "/c.json"}, 20);
    EXPECT_EQ(r.exit_code, 1);
    // 60 + 3 rounds of 35 splits, 512 layers, 4 transports: about 697 minutes of compute, and 10 more
    // of bytes: per round and layer 34 requests of 262512 bytes and 148 slot outputs of 262144
    // (the worker's 2 to 6 slots, rounded up, of 17 splits with both waits) at 10 GB/s
    EXPECT_NE(r.err.find("take at least 708 minutes of measuring, over --max-minutes 30"), std::string::npos) << r.err;
    // bytes alone: a slot of 1 us, but 64 outputs of 256 KiB per layer (pricing the slots alone said
    // 'at least 5 s' for a run of minutes)
    auto bytes = run_tool("moezip-ceiling", {"--slot-ms", "0.001", "--layers", "512", "--n-used", "64", "--n-embd", "65536",
                                              "--rounds", "1", "--transports", "zeromq", "--max-minutes", "1"}, 20);
    EXPECT_EQ(bytes.exit_code, 1);
    EXPECT_NE(bytes.err.find("over --max-minutes 1"), std::string::npos) << bytes.err;
    auto nan = run_tool("moezip-ceiling", {"--slot-ms", "nan"}, 20);
    EXPECT_EQ(nan.exit_code, 1);
    EXPECT_NE(nan.err.find("--slot-ms: not a number"), std::string::npos) << nan.err;
    EXPECT_FALSE(std::ifstream(test_dir("ceiling_long") + "/c.json").good()) << "refused before --out is written";
}

// The bench's flags for the tool come from local's decode phase run: a slot is the MoE's time per step
// over n_moe_layers * n_used. Here 4 layers of 2 ms a call after the first (the 1-token prompt's),
// 8 slots each: 0.25 ms a slot; the step 16 ms, so p = 8 / 16.
TEST(CeilingTool, TheBenchTakesTheSlotTimeAndMoeShareFromLocalsDecodePhaseRun) {
    const std::string dir = test_dir("ceiling_args");
    ASSERT_FALSE(dir.empty());
    ASSERT_EQ(mkdir((dir + "/runs").c_str(), 0755), 0);
    json layers = json::array();
    for (int il = 0; il < 4; ++il)
        layers.push_back({{"il", il}, {"calls", 11}, {"rows", 11}, {"ms", 22.0 + 1.0}, {"ms_local", 23.0}, {"ms_wait", 0.0},
                          {"ms_setup", 0.0}, {"first_call", {{"ms", 3.0}, {"ms_local", 3.0}}}});
    json report = {{"layers", layers}, {"workers", json::array()},
                   {"provider_map", {{{"n_embd", 2048}, {"n_used", 8}}}}};
    json meta = {{"id", "0001-a3b-L4-q8_0-local-lo-h0-decode-r0"}, {"model", "a3b-L4-q8_0"}, {"variant", "local"},
                 {"kind", "decode"}, {"net", "lo"}, {"placement", "h0"}, {"rc", 0}, {"run", "r.run.json"}, {"report", "r.report.json"}};
    json run = {{"prefill", {{"tokens", 1}, {"ms", 5.0}}}, {"decode", {{"tokens", 10}, {"ms", 160.0}}}};
    std::ofstream(dir + "/runs/0001.meta.json") << meta.dump();
    std::ofstream(dir + "/runs/r.run.json") << run.dump();
    std::ofstream(dir + "/runs/r.report.json") << report.dump();
    CommandResult r = run_command({"node", repo_root() + "/tools/bench/ceiling-args.js", dir, "a3b-L4-q8_0"}, {}, 60);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "--slot-ms 0.2500 --moe-share 0.5000 --layers 4 --n-used 8 --n-embd 2048\n");

    CommandResult none = run_command({"node", repo_root() + "/tools/bench/ceiling-args.js", dir, "a3b-L8-q8_0"}, {}, 60);
    EXPECT_EQ(none.exit_code, 1);
    EXPECT_NE(none.err.find("no local decode phase run of a3b-L8-q8_0"), std::string::npos) << none.err;
}

// A replicas run at 84% of the bound (paired) on a machine whose best ZeroMQ split of whole slots
// reaches 87.5% is at 96% of that ceiling; experts1_verify (bound 1: every tenth call recomputed here)
// is not held to it; a variant with too few pairs for an interval is read by its ratio of medians
// (0.7 / 0.875); the floor takes the tool's measured ZeroMQ round trip.
TEST(CeilingTool, TheBenchHoldsExpertsVariantsToTheWholeSlotCeilingAndFloorsWithItsRoundTrip) {
    const std::string dir = test_dir("ceiling_rows");
    ASSERT_FALSE(dir.empty());
    json c = {{"schema", "moezip-ceiling/1"}, {"shape", {{"moe_share", 0.66}, {"slot_ms", 0.19}}},
              {"zeromq", {{"rtt16_ms", 0.08}, {"best_whole_slots", {{"host_slots", 4.0}, {"of_bound", 0.875}}},
                          {"best", {{"host_slots", 4.5}, {"of_bound", 0.90}}}}},
              {"tcp_busy_poll", {{"rtt16_ms", 0.025}, {"best_whole_slots", {{"host_slots", 4.0}, {"of_bound", 0.98}}},
                                 {"best", {{"host_slots", 4.0}, {"of_bound", 0.98}}}}}};
    ASSERT_EQ(mkdir((dir + "/ceiling").c_str(), 0755), 0);
    std::ofstream(dir + "/ceiling/a3b-L4-q8_0.json") << c.dump();
    json rows = node_json(
        "const {load_ceilings, ceiling_rows} = require(process.argv[1] + '/ceiling.js');"
        "const {floor_rows} = require(process.argv[1] + '/floor.js');"
        "const c = load_ceilings(process.argv[2]);"
        "const b = 1 / (1 - 0.66 / 2);"
        "const a = [{model: 'a3b-L4-q8_0', variant: 'experts1_repl', net: 'lo', placement: 'h0', phase: 'decode', moe_share: 0.66,"
        "            bound: b, fraction_of_bound: 0.86, fraction_ci95: {point: 0.84, lo: 0.7875, hi: 0.875}},"
        "           {model: 'a3b-L4-q8_0', variant: 'experts1_verify', net: 'lo', placement: 'h0', phase: 'decode', moe_share: 0.66,"
        "            bound: 1, fraction_of_bound: 0.9, fraction_ci95: {point: 0.9, lo: 0.8, hi: 1.0}},"
        "           {model: 'a3b-L4-q8_0', variant: 'experts1_plan', net: 'lo', placement: 'h0', phase: 'decode', moe_share: 0.66,"
        "            bound: b, fraction_of_bound: 0.7, fraction_ci95: null},"
        "           {model: 'a3b-L4-q8_0', variant: 'experts1_repl', net: 'lo', placement: 'h0', phase: 'prefill', fraction_of_bound: 0.9},"
        "           {model: 'a3b-L4-q8_0', variant: 'shard1_auto_slow', net: 'lo', placement: 'h0', phase: 'decode', fraction_of_bound: 0.9}];"
        "const p = [{model: 'a3b-L4-q8_0', variant: 'experts1', phase: 'decode', net: 'lo', tokens: 10, n_moe_layers: 4, step_ms: 9,"
        "            workers: [{bytes_out: 1, bytes_in: 1}]}];"
        "console.log(JSON.stringify({rows: ceiling_rows(c, a), floor: floor_rows(p, c)}));",
        dir);
    ASSERT_EQ(rows["rows"].size(), 2u);
    // fewer than 4 pairs (no interval): the ratio of medians, over the same ceiling
    const json & plan = rows["rows"][1];
    EXPECT_EQ(plan["variant"], "experts1_plan");
    EXPECT_NEAR(plan["of_ceiling"].get<double>(), 0.8, 1e-9);
    EXPECT_TRUE(plan["of_ceiling_ci95"].is_null());
    const json & row = rows["rows"][0];
    EXPECT_EQ(row["variant"], "experts1_repl");
    EXPECT_NEAR(row["measured_of_bound"].get<double>(), 0.84, 1e-9);  // the paired point, not the medians' 0.86
    EXPECT_NEAR(row["of_ceiling"].get<double>(), 0.96, 1e-9);
    EXPECT_NEAR(row["of_ceiling_ci95"]["lo"].get<double>(), 0.90, 1e-9);
    EXPECT_NEAR(row["of_ceiling_ci95"]["hi"].get<double>(), 1.0, 1e-9);
    EXPECT_NEAR(row["busy_poll_whole_of_bound"].get<double>(), 0.98, 1e-9);
    ASSERT_EQ(rows["floor"].size(), 1u);
    EXPECT_NEAR(rows["floor"][0]["floor_ms"]["lo"].get<double>(), 4 * 0.08, 1e-9);
    EXPECT_EQ(rows["floor"][0]["rtt0_measured"], true);
}
