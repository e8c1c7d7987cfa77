// moezip-plan: places a MoE model's experts on hosts from the routing statistics of moezip reports,
// the hosts' memory budgets and their speeds; writes the coordinator's experts-mode config.
//   moezip-plan --report run.json --host here,24GiB --host tcp://10.0.0.2:5601,16GiB -o moezip.toml
// Exit status: 0 written; 1 the plan is impossible (budgets too small); 2 bad input or usage.
// How it places: tools/moezip-plan/placement.h; reference: docs/placement.md.
#include "tools/moezip-plan/placement.h"
#include "tools/moezip-plan/plan_hosts.h"
#include "tools/moezip-plan/plan_input.h"
#include "tools/moezip-plan/plan_output.h"

#include "coordinator/config/config.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <fstream>
#include <set>
#include <sstream>

using namespace moezip_plan;

namespace {

constexpr int exit_ok = 0, exit_impossible = 1, exit_usage = 2;

int fail(const std::string & message, int code = exit_usage) {
    fprintf(stderr, "moezip-plan: error: %s\n", message.c_str());
    return code;
}

struct Args {
    std::vector<std::string> reports, host_specs;
    std::string output, json_output, with_file, model = "MODEL.gguf";
    double prefill_weight = 0;
};

// Each host's relative speed: the flag, else measured (1 / ms per decode slot), else the mean of
// the measured hosts, else 1.
void resolve_speeds(const RoutingLoad & in, PlanContext & ctx) {
    double sum = 0;
    int n = 0;
    for (const PlanHost & h : ctx.hosts) {
        auto it = in.ms_per_slot.find(h.endpoint);
        if (h.speed <= 0 && it != in.ms_per_slot.end() && it->second > 0) { sum += 1.0 / it->second; ++n; }
    }
    for (const PlanHost & h : ctx.hosts) {
        auto it = in.ms_per_slot.find(h.endpoint);
        if (h.speed > 0) { ctx.speeds.push_back(h.speed); ctx.speed_from.push_back("flag"); }
        else if (it != in.ms_per_slot.end() && it->second > 0) { ctx.speeds.push_back(1.0 / it->second); ctx.speed_from.push_back("measured"); }
        else { ctx.speeds.push_back(n > 0 ? sum / n : 1.0); ctx.speed_from.push_back("assumed"); }
    }
}

int plan(const Args & a) {
    RoutingLoad in;
    for (const std::string & r : a.reports) {
        moezip::Status st = plan_input_add_report(r, in);
        if (!st) return fail(st.message());
    }
    PlanContext ctx;
    ctx.input = &in;
    ctx.model = a.model;
    std::set<std::string> seen;
    for (const std::string & spec : a.host_specs) {
        PlanHost h;
        moezip::Status st = plan_host_parse(spec, h);
        if (!st) return fail(st.message());
        if (!seen.insert(h.endpoint).second) return fail("--host \"" + spec + "\": " + h.endpoint + " is given twice");
        ctx.hosts.push_back(h);
    }
    if (!a.with_file.empty()) {
        std::ifstream f(a.with_file);
        if (!f) return fail("--with " + a.with_file + ": cannot read");
        std::stringstream ss;
        ss << f.rdbuf();
        ctx.with = ss.str();
    }
    resolve_speeds(in, ctx);
    ctx.prefill_weight = a.prefill_weight;
    std::vector<std::vector<double>> load = plan_input_load(in, a.prefill_weight);
    double decode_total = 0;
    for (const auto & l : in.decode)
        for (double v : l) decode_total += v;
    if (decode_total == 0 && a.prefill_weight == 0) {
        fprintf(stderr, "moezip-plan: the reports have no decode slots: placing by prefill slots\n");
        ctx.prefill_weight = 1;
        load = plan_input_load(in, 1);
    }
    Placement p;
    moezip::Status st = plan_place(load, in.n_expert, in.expert_bytes, ctx.hosts, ctx.speeds, p);
    if (!st) return fail(st.message(), st.message().rfind("budgets too small", 0) == 0 ? exit_impossible : exit_usage);
    const std::string toml = plan_toml(ctx, p);
    // the plan must be a config moezip loads (the --with text could clash with what is written)
    moezip::Config check;
    st = moezip::config_load_string(toml, a.output.empty() ? "<plan>" : a.output, check);
    if (!st) return fail("the written config does not load (check --with):\n" + st.message());
    st = moezip::config_check_expert_coverage(check, in.n_expert);
    if (!st) return fail("internal: the plan leaves an expert without owner: " + st.message());
    if (a.output.empty()) fputs(toml.c_str(), stdout);
    else if (!(std::ofstream(a.output) << toml)) return fail(a.output + ": cannot write");
    if (!a.json_output.empty() && !(std::ofstream(a.json_output) << plan_json(ctx, p).dump(1) << "\n"))
        return fail(a.json_output + ": cannot write");
    if (!a.output.empty()) fputs(toml.substr(0, toml.find("mode = ")).c_str(), stderr);  // the summary comments
    return exit_ok;
}

int run(int argc, char ** argv) {
    CLI::App app{"moezip-plan: place a MoE model's experts on hosts from the routing statistics of moezip reports"};
    app.footer("Each --host is ENDPOINT,BUDGET[,speed=S][,public_key=K]: ENDPOINT \"here\" for this host (the coordinator)\n"
               "or a worker's tcp:// or ipc:// endpoint; BUDGET the memory for experts (24GiB, 1.5G, 800M; K/M/G/T = 1024^n).\n"
               "Exit codes: 0 = written; 1 = the budgets cannot hold every expert; 2 = bad input or usage.");
    Args a;
    app.add_option("-r,--report", a.reports, "moezip report with routing statistics (repeatable; counts are summed)")->required();
    app.add_option("--host", a.host_specs, "a host: ENDPOINT,BUDGET[,speed=S][,public_key=K] (repeatable, in [[worker]] order)")
        ->required();
    app.add_option("-o,--output", a.output, "config to write (default: standard output)");
    app.add_option("--json", a.json_output, "also write the plan as JSON");
    app.add_option("--with", a.with_file, "TOML put into the config after mode (top-level keys, [dispatch], ...)");
    app.add_option("--model", a.model, "model path in the workers' command lines")->capture_default_str();
    app.add_option("--prefill-weight", a.prefill_weight, "weight of a prefill slot against a decode slot (default 0: balance decode)")
        ->check(CLI::Range(0.0, 1000.0));
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        const int code = app.exit(e);
        return code == 0 ? exit_ok : exit_usage;
    }
    return plan(a);
}

} // namespace

int main(int argc, char ** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception & e) {
        return fail(e.what());
    }
}
