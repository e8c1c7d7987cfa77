// moezip-plan (tools/moezip-plan/): from a report's routing statistics and the hosts' budgets to
// an experts-mode config that covers every expert, fits the budgets, replicates the hottest experts
// with the memory left, and whose run gives the single-node logits.
#include "tests/support/cluster.h"

#include "coordinator/config/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

using namespace moezip_test;
using nlohmann::json;

namespace {

const std::vector<std::string> kModel = {"--preset", "tiny", "--type", "q8_0", "--n-expert", "16", "--n-expert-used", "4"};
constexpr uint64_t kExpertBytes = 26112;  // tiny q8_0: 3 x 64 rows x 68 bytes x 2 layers

CommandResult run_host(const std::string & dir, const std::string & name, const std::string & model, const std::string & config) {
    std::vector<std::string> argv = {bin_path("moezip-run"), "-m", model, "-n", "32", "-b", "512", "--quiet", "--no-repack",
                                     "--json", dir + "/" + name + "-run.json", "--fixture", "128"};
    return run_preloaded(argv, config);
}

/// A local-mode run of the model: its report has the routing statistics (`<dir>/calibrate.json`).
std::string calibration_report(const std::string & dir, const std::string & model) {
    CommandResult r = run_host(dir, "calibrate", model, write_moezip_config(dir, "calibrate", "mode = \"local\"\n"));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return dir + "/calibrate.json";
}

CommandResult plan(const std::vector<std::string> & args) { return run_tool("moezip-plan", args, 300); }

std::string budget(int experts) { return std::to_string(experts * kExpertBytes); }

TEST(PlanTool, CoversEveryExpertFitsTheBudgetsAndReplicatesTheHottest) {
    const std::string model = fixture_model(kModel);
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("plan_cover");
    const std::string report = calibration_report(dir, model);
    // 6 + 12 experts of room for 16 experts: every expert once, the two hottest twice
    CommandResult r = plan({"--report", report, "--host", "here," + budget(6), "--host", "tcp://10.0.0.2:5601," + budget(12),
                            "-o", dir + "/plan.toml", "--json", dir + "/plan.json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json p = load_json(dir + "/plan.json");
    EXPECT_EQ(p["n_expert"], 16);
    EXPECT_EQ(p["expert_bytes"], kExpertBytes) << "the expert size comes from the report's provider map";
    EXPECT_EQ(p["replicated"], 2);
    std::multiset<int> owned;
    for (const json & h : p["hosts"]) {
        EXPECT_LE(h["bytes"].get<uint64_t>(), h["budget_bytes"].get<uint64_t>()) << h.dump();
        EXPECT_EQ(h["count"], h["capacity"]) << "the memory left holds replicas: " << h.dump();
        std::vector<moezip::ExpertRange> ranges;
        ASSERT_TRUE(moezip::expert_ranges_parse(h["experts"].get<std::string>(), ranges).is_ok());
        for (const auto & rg : ranges)
            for (int e = rg.first; e <= rg.last; ++e) owned.insert(e);
    }
    for (int e = 0; e < 16; ++e) EXPECT_GE(owned.count(e), 1u) << "expert " << e << " has no owner";
    // replicas go to the hottest experts a host with room does not hold yet: hotter than the median
    json rep = load_json(report);
    std::vector<double> load(16, 0);
    for (const json & l : rep["routing"])
        for (int e = 0; e < 16; ++e) load[e] += l["decode"][e].get<double>();
    std::vector<double> sorted = load;
    std::sort(sorted.begin(), sorted.end());
    const double median = (sorted[7] + sorted[8]) / 2;
    for (int e = 0; e < 16; ++e)
        if (owned.count(e) == 2) { EXPECT_GT(load[e], median) << "replicated expert " << e << " is cold"; }
    // the written config is one moezip loads, with replicas on and every expert owned
    moezip::Config cfg;
    moezip::Status st = moezip::config_load_file(dir + "/plan.toml", cfg);
    ASSERT_TRUE(st.is_ok()) << st.message();
    EXPECT_TRUE(cfg.experts.replicas);
    EXPECT_TRUE(moezip::config_check_expert_coverage(cfg, 16).is_ok());
    EXPECT_NE(read_file(dir + "/plan.toml").find("moezip-worker --model MODEL.gguf --bind tcp://10.0.0.2:5601 --experts "),
              std::string::npos) << "the worker's command line is written beside its [[worker]]";
}

TEST(PlanTool, BudgetsTooSmallForEveryExpertIsANamedError) {
    const std::string model = fixture_model(kModel);
    const std::string dir = test_dir("plan_small");
    const std::string report = calibration_report(dir, model);
    CommandResult r = plan({"--report", report, "--host", "here," + budget(6), "--host", "ipc:///tmp/w.sock," + budget(9)});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("budgets too small: the hosts hold 15 of the model's 16 experts"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ipc:///tmp/w.sock"), std::string::npos) << "each host and its budget are named: " << r.err;
    EXPECT_NE(r.err.find("more are needed"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << "no config is written: " << r.out;
}

TEST(PlanTool, BadHostAndReportAreNamed) {
    const std::string dir = test_dir("plan_bad");
    CommandResult r = plan({"--report", dir + "/none.json", "--host", "here,1G"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find(dir + "/none.json: cannot read"), std::string::npos) << r.err;
    std::ofstream(dir + "/empty.json") << "{\"schema\": \"moezip-report/1\", \"routing\": []}";
    r = plan({"--report", dir + "/empty.json", "--host", "here,1G"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("no routing statistics"), std::string::npos) << r.err;
    const std::string model = fixture_model(kModel);
    const std::string report = calibration_report(dir, model);
    r = plan({"--report", report, "--host", "tcp://10.0.0.2,1G"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("--host \"tcp://10.0.0.2,1G\": endpoint:"), std::string::npos) << r.err;
    r = plan({"--report", report, "--host", "here,lots"});
    EXPECT_NE(r.err.find("budget: \"lots\" is not a size"), std::string::npos) << r.err;
    r = plan({"--report", report, "--host", "here,1G,speed=-1"});
    EXPECT_NE(r.err.find("speed: expected a positive number, got \"-1\""), std::string::npos) << r.err;
}

TEST(PlanTool, AFasterHostIsGivenMoreOfTheLoad) {
    const std::string model = fixture_model(kModel);
    const std::string dir = test_dir("plan_speed");
    const std::string report = calibration_report(dir, model);
    CommandResult r = plan({"--report", report, "--host", "here," + budget(16) + ",speed=3", "--host",
                            "ipc:///tmp/w.sock," + budget(16) + ",speed=1", "--json", dir + "/plan.json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json p = load_json(dir + "/plan.json");
    EXPECT_GT(p["hosts"][0]["share"].get<double>(), 0.6) << p.dump();
    EXPECT_EQ(p["hosts"][0]["speed_from"], "flag");
    EXPECT_EQ(p["replicated"], 16) << "room for every expert on both: all replicated";
}

TEST(PlanTool, SpeedsAreMeasuredFromTheWorkersServiceTimesAndThisHostsLocalTime) {
    const std::string model = fixture_model(kModel);
    const std::string dir = test_dir("plan_measured");
    json rep = load_json(calibration_report(dir, model));
    // as a distributed run reports them: a worker's service time per slot; a rows-mode balance
    // section (per row, not per slot) is not taken for per-slot speeds
    rep["workers"] = json::array({{{"endpoint", "ipc:///tmp/w.sock"}, {"slots", 100}, {"service_ms_total", 50.0}}});
    rep["balance"] = {{"mode", "rows"}, {"hosts", json::array({{{"host", "here"}, {"ms_per_unit_small", 9.0}, {"samples_small", 3}}})}};
    std::ofstream(dir + "/measured.json") << rep.dump();
    CommandResult r = plan({"--report", dir + "/measured.json", "--host", "here," + budget(16), "--host",
                            "ipc:///tmp/w.sock," + budget(16), "--json", dir + "/plan.json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json p = load_json(dir + "/plan.json");
    EXPECT_EQ(p["hosts"][0]["speed_from"], "measured") << "from the layers' local time per local slot: " << p.dump();
    EXPECT_EQ(p["hosts"][1]["speed_from"], "measured") << p.dump();
    EXPECT_DOUBLE_EQ(p["hosts"][1]["speed"].get<double>(), 2.0) << "1 / 0.5 ms per slot: " << p.dump();
}

TEST(PlanTool, ARunWithThePlannedPlacementGivesTheSingleNodeLogits) {
    const std::string model = fixture_model(kModel);
    Cluster c{test_dir("plan_run"), {}};
    const std::string report = calibration_report(c.dir, model);
    const std::string endpoint = "ipc://" + c.dir + "/w.sock";
    std::ofstream(c.dir + "/with.toml") << "no_repack = true\nrequire_intercept = true\nreport = \"" << c.dir << "/planned.json\"\n";
    CommandResult r = plan({"--report", report, "--host", "here," + budget(9), "--host", endpoint + "," + budget(9), "--with",
                            c.dir + "/with.toml", "-o", c.dir + "/planned.toml", "--json", c.dir + "/plan.json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json p = load_json(c.dir + "/plan.json");
    ASSERT_TRUE(c.start_worker(model, endpoint, p["hosts"][1]["experts"].get<std::string>()));
    CommandResult single = run_host(c.dir, "single", model, write_moezip_config(c.dir, "single", "mode = \"observe\"\n"));
    ASSERT_EQ(single.exit_code, 0) << single.err;
    CommandResult planned = run_host(c.dir, "planned", model, c.dir + "/planned.toml");
    ASSERT_EQ(planned.exit_code, 0) << planned.err;
    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", c.dir + "/single.json", c.dir + "/planned.json"});
    EXPECT_EQ(cmp.exit_code, 0) << cmp.out << cmp.err;
    EXPECT_EQ(load_json(c.dir + "/single-run.json")["tokens"], load_json(c.dir + "/planned-run.json")["tokens"]);
    json rep = load_json(c.dir + "/planned.json");
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u);
    EXPECT_GT(rep["workers"][0]["slots"].get<uint64_t>(), 0u) << "the worker computed its experts";
    EXPECT_EQ(rep["balance"]["hosts"].size(), 2u) << "2 replicas: balanced dispatch is on";
}

} // namespace
