// numerics = "approximate": a worker that computes with another CPU variant of the same engine
// (here the haswell library of the node-llama-cpp build, alone in an engine folder of symlinks) is
// refused in exact mode with the reason, and accepted in approximate mode, where its results are
// checked by verify_every within the tolerances and the report names it and its measured error.
#include "provider_map/engine_pin.h"
#include "tests/support/cluster.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <unistd.h>

using namespace moezip_test;
using nlohmann::json;

namespace {

/// An engine folder holding the engine's libraries but only the CPU variant `variant`; "" when the
/// engine has no such variant.
std::string engine_with_variant(const std::string & dir, const std::string & variant) {
    const std::string lib = moezip::engine_pin().lib_dir, out = dir + "/engine-" + variant;
    if (access((lib + "/libggml-cpu-" + variant + ".so").c_str(), R_OK) != 0) return "";
    mkdir(out.c_str(), 0755);
    DIR * d = opendir(lib.c_str());
    if (d == nullptr) return "";
    while (dirent * e = readdir(d)) {
        const std::string name = e->d_name;
        if (name.find(".so") == std::string::npos) continue;
        if (name.rfind("libggml-cpu", 0) == 0 && name != "libggml-cpu-" + variant + ".so") continue;
        (void) symlink((lib + "/" + name).c_str(), (out + "/" + name).c_str());
    }
    closedir(d);
    return out;
}

CommandResult run_host(const std::string & dir, const std::string & name, const std::string & model, const std::string & body) {
    std::vector<std::string> argv = {bin_path("moezip-run"), "-m", model, "-n", "16", "-b", "512", "--quiet", "--no-repack",
                                     "--json", dir + "/" + name + "-run.json", "--fixture", "64"};
    return run_preloaded(argv, write_moezip_config(dir, name, body));
}

TEST(Approximate, AnotherCpuVariantIsRefusedWhenExactAndCheckedWithinToleranceWhenApproximate) {
    // f32: the variants' dot products differ in vector width (AVX2 8 lanes, AVX-512 16), so the bits differ
    const std::string model = fixture_model({"--preset", "small", "--type", "f32"});
    ASSERT_FALSE(model.empty());
    Cluster c{test_dir("approximate"), {}};
    const std::string engine = engine_with_variant(c.dir, "haswell");
    if (engine.empty()) GTEST_SKIP() << "the engine has no haswell CPU library";
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w.sock", "", {}, {"--engine", engine}));
    ASSERT_EQ(run_host(c.dir, "single", model, "mode = \"observe\"\n").exit_code, 0);
    if (load_json(c.dir + "/single.json")["engine"]["cpu_variant"] == "haswell") GTEST_SKIP() << "this host runs haswell itself";
    const std::string worker = "[[worker]]\nendpoint = \"" + c.workers[0]->endpoint() + "\"\nexperts = \"4-7\"\n";
    // exact (the default): refused with the reason, and require_intercept fails the run
    CommandResult exact = run_host(c.dir, "exact", model, "require_intercept = true\nmode = \"experts\"\n[experts]\nlocal = \"0-3\"\n" + worker);
    EXPECT_EQ(exact.exit_code, 4) << exact.err;
    EXPECT_NE(exact.err.find("it computes with CPU variant haswell"), std::string::npos) << exact.err;
    EXPECT_NE(exact.err.find("numerics = \"approximate\""), std::string::npos) << "the refusal names the way out: " << exact.err;
    // approximate: used, every result checked here within the tolerances
    CommandResult approx = run_host(c.dir, "approx", model,
                                    "require_intercept = true\nnumerics = \"approximate\"\nverify_every = 1\nmode = \"experts\"\n"
                                    "[experts]\nlocal = \"0-3\"\n" + worker);
    ASSERT_EQ(approx.exit_code, 0) << approx.err;
    json rep = load_json(c.dir + "/approx.json");
    const json & w = rep["workers"][0];
    EXPECT_EQ(w["refused"], "") << w.dump();
    EXPECT_EQ(w["identity"]["cpu_variant"], "haswell") << w.dump();
    EXPECT_EQ(w["numerics"], "approximate") << w.dump();
    EXPECT_NE(w["inexact"].get<std::string>().find("its results are not bit-exact"), std::string::npos) << w.dump();
    EXPECT_GT(w["slots"].get<uint64_t>(), 0u) << "the worker computed: " << w.dump();
    EXPECT_EQ(w["verify"]["checked"].get<uint64_t>(), w["requests"].get<uint64_t>() - 1) << "every result but hello: " << w.dump();
    EXPECT_EQ(w["verify"]["mismatches"], 0) << w.dump();
    EXPECT_LE(w["verify"]["max_abs"].get<double>(), 1e-4) << w.dump();
    EXPECT_GT(w["verify"]["max_abs"].get<double>(), 0.0) << "another variant, other bits: the check measured them: " << w.dump();
    EXPECT_GE(w["verify"]["min_cosine"].get<double>(), 0.99999) << w.dump();
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u);
    // the logits are not the single-node bits, and the run says so loudly
    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", c.dir + "/single.json", c.dir + "/approx.json"});
    EXPECT_EQ(cmp.exit_code, 1) << cmp.out << cmp.err;
    bool said = false;
    for (const json & e : rep["errors"]["first"]) said = said || e.get<std::string>().find("not bit-exact") != std::string::npos;
    EXPECT_TRUE(said) << rep["errors"].dump();
    std::printf("haswell worker against zen4 here: max abs %g, min cosine %.12f over %llu checked results\n",
                w["verify"]["max_abs"].get<double>(), w["verify"]["min_cosine"].get<double>(),
                (unsigned long long) w["verify"]["checked"].get<uint64_t>());
}

} // namespace
