// The per-call timeline (config `trace`): the Trace class on its own (cap, dropped marker, order,
// threads), and a real experts-mode run with two workers under the preload whose trace must parse
// and hold every layer's regions, every worker's requests with their service times, in time order.
#include "coordinator/evidence/trace.h"
#include "tests/support/cluster.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <thread>

using namespace moezip;
using namespace moezip_test;
using nlohmann::json;

namespace {

/// The "X" events of a trace file's JSON, in file order.
std::vector<json> complete_events(const json & trace) {
    std::vector<json> out;
    for (const json & e : trace["traceEvents"])
        if (e["ph"] == "X") out.push_back(e);
    return out;
}

/// The track id a thread_name metadata event gives `name`; -1 when none does.
int64_t track_named(const json & trace, const std::string & name) {
    for (const json & e : trace["traceEvents"])
        if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == name) return e["tid"].get<int64_t>();
    return -1;
}

} // namespace

TEST(Trace, KeepsAtMostTheCapAndCountsTheRestInOneMarker) {
    Trace t(10);
    const auto t0 = Trace::clock::now();
    for (int i = 0; i < 25; ++i) t.add("e" + std::to_string(i), "test", 1, t0 + std::chrono::microseconds(25 - i), t0 + std::chrono::microseconds(30));
    EXPECT_EQ(t.size(), 10u);
    EXPECT_EQ(t.dropped(), 15u);
    json j = t.to_json();
    EXPECT_EQ(complete_events(j).size(), 10u);
    int markers = 0;
    for (const json & e : j["traceEvents"]) {
        if (e["ph"] != "i") continue;
        ++markers;
        EXPECT_EQ(e["args"]["dropped_events"], 15) << e.dump();
        EXPECT_NE(e["name"].get<std::string>().find("dropped 15 events"), std::string::npos) << e.dump();
    }
    EXPECT_EQ(markers, 1);
    EXPECT_EQ(j["otherData"]["dropped_events"], 15);
    EXPECT_EQ(j["otherData"]["max_events"], 10);
}

TEST(Trace, EventsComeOutByStartWithParentsBeforeChildren) {
    Trace t(100);
    const auto t0 = Trace::clock::now();
    auto us = [&](int n) { return t0 + std::chrono::microseconds(n); };
    t.add("child", "test", 1, us(100), us(150));   // ends first, so it is added first
    t.add("late", "test", 1, us(300), us(310));
    t.add("parent", "test", 1, us(100), us(200));
    t.add("early", "test", 1, us(50), us(60));
    t.add("backwards", "test", 1, us(400), us(390)); // an end before its start is a zero-length event
    std::vector<std::string> names;
    double last = -1e300;
    for (const json & e : complete_events(t.to_json())) {
        names.push_back(e["name"]);
        EXPECT_GE(e["ts"].get<double>(), last);
        EXPECT_GE(e["dur"].get<double>(), 0.0);
        last = e["ts"].get<double>();
    }
    EXPECT_EQ(names, (std::vector<std::string>{"early", "parent", "child", "late", "backwards"}));
}

TEST(Trace, ThreadsRecordingAtOnceLoseNothingBelowTheCap) {
    Trace t(3000);
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k)
        threads.emplace_back([&t, k] {
            for (int i = 0; i < 1000; ++i) t.add("e", "test", k, Trace::clock::now(), Trace::clock::now());
        });
    for (auto & th : threads) th.join();
    EXPECT_EQ(t.size(), 3000u);
    EXPECT_EQ(t.dropped(), 1000u);
}

TEST(Trace, WorkerTracksAreNamedByEndpointAndStable) {
    Trace t(10);
    const int64_t a = t.worker_track("tcp://10.0.0.2:5601"), b = t.worker_track("ipc:///tmp/w1");
    EXPECT_NE(a, b);
    EXPECT_EQ(t.worker_track("tcp://10.0.0.2:5601"), a);
    EXPECT_EQ(track_named(t.to_json(), "worker tcp://10.0.0.2:5601"), a);
}

TEST(Trace, BytesThatAreNotUtf8AreReplacedNotThrown) {
    Trace t(10);
    // an error message may quote a tensor name from the model file, any bytes
    t.add("region", "region", 1, Trace::clock::now(), Trace::clock::now(), {{"error", std::string("bad \xff\xfe name")}});
    const std::string path = test_dir("trace_utf8") + "/t.json";
    ASSERT_TRUE(t.write(path).is_ok());
    const json j = load_json(path);
    ASSERT_EQ(complete_events(j).size(), 1u);
    EXPECT_EQ(complete_events(j)[0]["args"]["error"], "bad \xef\xbf\xbd\xef\xbf\xbd name");  // U+FFFD twice
}

TEST(Trace, WriteToAMissingFolderIsAnErrorNotACrash) {
    Trace t(10);
    Status st = t.write(test_dir("trace_nofolder") + "/no/such/folder/t.json");
    EXPECT_EQ(st.code(), Status::Code::io_error);
    EXPECT_NE(st.message().find("cannot write trace"), std::string::npos) << st.message();
}

TEST(TraceRun, ExpertsModeTraceHoldsEveryLayerAndWorkerInTimeOrder) {
    std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    ASSERT_FALSE(model.empty());
    Cluster c{test_dir("trace_run"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/e0.sock", "2-4"));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/e1.sock", "5-7"));
    const std::string e0 = c.workers[0]->endpoint(), e1 = c.workers[1]->endpoint();
    const std::string workers = "[[worker]]\nendpoint = \"" + e0 + "\"\nexperts = \"2-4\"\n"
                                "[[worker]]\nendpoint = \"" + e1 + "\"\nexperts = \"5-7\"\n";
    auto run = [&](const std::string & name, const std::string & extra) {
        const std::string body = "require_intercept = true\nmode = \"experts\"\ntrace = \"" + c.dir + "/" + name + ".trace.%p.json\"\n" +
                                 extra + "[experts]\nlocal = \"0-1\"\n" + workers;
        return run_preloaded({bin_path("moezip-run"), "-m", model, "-n", "8", "-b", "512", "--quiet", "--no-repack", "--fixture", "64"},
                             write_moezip_config(c.dir, name, body));
    };
    CommandResult r = run("full", "");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json rep = load_json(c.dir + "/full.json");
    const std::string path = c.dir + "/full.trace." + std::to_string(rep["pid"].get<int>()) + ".json";
    const json tr = load_json(path);
    ASSERT_TRUE(tr.is_object()) << path;
    EXPECT_EQ(tr["otherData"]["dropped_events"], 0);

    // every region the report counts is in the trace, per layer, with its rows
    std::map<int, uint64_t> regions, region_rows;
    std::map<std::string, int> by_cat;
    std::map<int64_t, int> requests_on_track;
    double last_ts = -1;
    bool service_inside_round_trip = true, service_positive = true;
    for (const json & e : complete_events(tr)) {
        const double ts = e["ts"].get<double>();
        EXPECT_GE(ts, last_ts) << "events out of time order: " << e.dump();
        last_ts = ts;
        const std::string cat = e["cat"];
        ++by_cat[cat];
        if (cat == "region") {
            ++regions[e["args"]["layer"].get<int>()];
            region_rows[e["args"]["layer"].get<int>()] += e["args"]["rows"].get<uint64_t>();
        }
        if (cat == "worker" && e["args"]["kind"] == "result") {
            ++requests_on_track[e["tid"].get<int64_t>()];
            if (!(e["args"]["service_ms"].get<double>() > 0)) service_positive = false;
            if (e["args"]["service_ms"].get<double>() > e["args"]["rtt_ms"].get<double>() + 1e-3) service_inside_round_trip = false;
        }
    }
    ASSERT_FALSE(rep["layers"].empty());
    for (const json & l : rep["layers"]) {
        const int il = l["il"].get<int>();
        EXPECT_EQ(regions[il], l["calls"].get<uint64_t>()) << "layer " << il;
        EXPECT_EQ(region_rows[il], l["rows"].get<uint64_t>()) << "layer " << il;
    }
    EXPECT_EQ(regions.size(), rep["layers"].size());
    EXPECT_TRUE(service_positive) << "every result carries the worker's service time";
    EXPECT_TRUE(service_inside_round_trip) << "a worker's service time never exceeds its round trip";
    // each worker has its own named track with every result the report counts for it
    for (const std::string & ep : {e0, e1}) {
        const int64_t track = track_named(tr, "worker " + ep);
        ASSERT_GE(track, 0) << ep;
        uint64_t requests = 0;
        for (const json & w : rep["workers"])
            if (w.value("endpoint", "") == ep) requests = w["requests"].get<uint64_t>();
        EXPECT_GT(requests_on_track[track], 0) << ep;
        // the report's requests count the hello too; every other one is a result on the track
        EXPECT_EQ((uint64_t) requests_on_track[track] + 1, requests) << ep;
    }
    EXPECT_GT(by_cat["send"], 0);
    EXPECT_GT(by_cat["compute"], 0);   // experts 0-1 are this host's
    EXPECT_GT(by_cat["wait"], 0);
    EXPECT_EQ((uint64_t) by_cat["combine"], (uint64_t) by_cat["region"]);
    EXPECT_GT(by_cat["service"], 0);

    // the same run with a cap of 40 events: 40 kept, the rest counted in one marker
    r = run("capped", "trace_max_events = 40\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const int pid = load_json(c.dir + "/capped.json")["pid"].get<int>();
    const json capped = load_json(c.dir + "/capped.trace." + std::to_string(pid) + ".json");
    EXPECT_EQ(complete_events(capped).size(), 40u);
    const uint64_t total = complete_events(tr).size();
    EXPECT_EQ(capped["otherData"]["dropped_events"].get<uint64_t>() + 40, total)
        << "the same run records the same number of events";
}
