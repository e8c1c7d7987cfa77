// Tests of the TOML config (coordinator/config/config.h) against the files in fixtures/config/:
// one file per bad case, named for its error, and three good ones.
#include "coordinator/config/config.h"
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <random>
#include <set>

using namespace moezip;

namespace {

std::string fixture(const std::string & name) { return moezip_test::repo_root() + "/fixtures/config/" + name; }

/// A bad fixture and what its message must name: "FILE:WHERE: KEY: " and a fragment.
struct BadCase {
    const char * file;
    const char * where;     ///< "LINE" for field errors, "LINE:COL" for syntax errors
    const char * key;       ///< key path, "" when the error has none
    const char * fragment;  ///< a part of the explanation
};

const BadCase bad_cases[] = {
    {"unknown_key.toml", "4", "rows.local_shares", "unknown key (did you mean \"local_share\"? known in [rows]: local_share, min_rows)"},
    {"unknown_table.toml", "3", "row", "unknown key (did you mean \"rows\"?"},
    {"bad_mode.toml", "2", "mode", "expected \"observe\" | \"local\" | \"rows\" | \"experts\" | \"shard\", got \"distributed\""},
    {"bad_log_level.toml", "1", "log", "got \"verbose\""},
    {"timeout_negative.toml", "13", "worker[1].timeout_ms", "expected integer 1..600000, got -5"},
    {"wrong_type.toml", "2", "report_flush_ms", "expected integer 0..3600000, got string \"1000\""},
    {"trace_empty_path.toml", "2", "trace", "expected a non-empty path, got \"\""},
    {"model_empty_path.toml", "2", "model", "expected a non-empty path to a GGUF file, got \"\""},
    {"trace_max_events_zero.toml", "4", "trace_max_events", "expected integer 1..10000000, got 0"},
    {"float_for_integer.toml", "2", "dispatch.connect_timeout_ms", "got float 5000.0"},
    {"min_rows_zero.toml", "3", "rows.min_rows", "expected integer 1..1000000, got 0"},
    {"shares_do_not_sum.toml", "4", "rows.local_share", "got 0.5 + 0.3 + 0.3 = 1.1"},
    {"share_missing.toml", "6", "worker[0].share", "required in rows mode"},
    {"unknown_worker_key.toml", "5", "worker[0].timeout", "did you mean \"timeout_ms\"?"},
    {"rows_without_workers.toml", "4", "rows.local_share", "needs local_share = 1, got 0.5"},
    {"overlapping_experts.toml", "12", "worker[1].experts", "expert 6 is owned by both worker[0] (worker[0].experts, line 8) and worker[1]"},
    {"coordinator_overlaps_worker.toml", "8", "worker[0].experts", "expert 4 is owned by both the coordinator"},
    {"overlapping_experts.toml", "12", "worker[1].experts", "(set experts.replicas = true to hold it on both)"},
    {"replicas_with_partial.toml", "6", "experts.replicas", "needs combine = \"exact\""},
    {"auto_share_with_number.toml", "8", "worker[0].share", "rows.local_share = \"auto\" measures every share: write \"auto\" or leave it out, got 0.5"},
    {"auto_share_alone.toml", "8", "worker[0].share", "\"auto\" needs shard.local_share = \"auto\" too"},
    {"approximate_without_verify.toml", "2", "numerics", "\"approximate\" needs dispatch.verify_every"},
    {"share_not_auto.toml", "4", "rows.local_share", "expected number 0..1 or \"auto\", got \"fast\""},
    {"bad_expert_range.toml", "5", "worker[0].experts", "range start 7 is above its end 4"},
    {"worker_without_experts.toml", "6", "worker[0].experts", "required in experts mode"},
    {"shadow_without_partial.toml", "5", "experts.shadow_every", "only used with combine = \"partial\""},
    {"duplicate_endpoint.toml", "7", "worker[1].endpoint", "already used by worker[0] (line 4)"},
    {"bad_endpoint.toml", "2", "worker[0].endpoint", "expected \"tcp://host:port\" or \"ipc:///path\""},
    {"bad_bind.toml", "2", "worker_server.bind", "port must be 1..65535"},
    {"missing_endpoint.toml", "3", "worker[0].endpoint", "required key is missing"},
    {"worker_not_array.toml", "3", "worker", "expected an array of tables [[worker]], got a table"},
    {"duplicate_table.toml", "4:1", "dispatch", "duplicate table [dispatch]"},
    {"duplicate_quoted_table.toml", "4:1", "rows", "duplicate table [rows]"},
    {"duplicate_key.toml", "3:1", "dispatch.timeout_ms", "duplicate key"},
    {"integer_out_of_range.toml", "2:14", "dispatch.timeout_ms", "integer 99999999999999999999 does not fit in 64 bits"},
    {"not_toml.toml", "1:", "", "not valid TOML"},
    {"not_utf8.toml", "2:", "", "not a UTF-8 text file"},
    // inputs toml++ 3.3.0 did not survive (abort or __builtin_unreachable; config_precheck.cpp)
    {"array_closing_brace.toml", "3:9", "mode", "not valid TOML (expected a value or ']' in the array, saw '}')"},
    {"table_header_without_name.toml", "4:2", "", "a table header needs a name"},
    {"non_ascii_outside_string.toml", "3:4", "mod\xc3\xa9", "'\xc3\xa9' (U+00E9) outside a string or comment"},
    {"non_ascii_after_line_ending_backslash.toml", "4:5", "report", "(U+00E9) as the first character after a line-ending backslash"},
    {"key_too_many_parts.toml", "2:32", "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q", "a key of more than 16 dotted parts"},
    {"nested_too_deep.toml", "3:21", "x", "arrays and inline tables nested more than 16 deep"},
    // endpoints the config check rejects rather than zmq at connect time
    {"ipc_path_too_long.toml", "5", "worker[0].endpoint", "(ipc path is 125 bytes; a Unix socket path holds at most 107)"},
    {"tcp_port_not_a_number.toml", "2", "worker[0].endpoint", "(port must be 1..65535, got \"56o1\")"},
    {"tcp_host_empty.toml", "5", "worker[1].endpoint", "got \"tcp://:5602\" (empty host)"},
    {"tcp_host_with_space.toml", "2", "worker[0].endpoint", "(host \"10.0.0.2 \" contains a space)"},
};

const char * good_files[] = {"observe_minimal.toml", "rows_two_workers.toml", "experts_split.toml"};

Config load_good(const std::string & name) {
    Config cfg;
    Status st = config_load_file(fixture(name), cfg);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return cfg;
}

} // namespace

TEST(ConfigFile, EachBadFixtureNamesItsLineAndKey) {
    for (const BadCase & c : bad_cases) {
        Config cfg;
        Status st = config_load_file(fixture(c.file), cfg);
        ASSERT_FALSE(st.is_ok()) << c.file << " was accepted";
        EXPECT_EQ(st.code(), Status::Code::invalid_argument) << c.file;
        std::string head = std::string(c.file) + ":" + c.where + (c.key[0] ? std::string(": ") + c.key + ": " : "");
        EXPECT_NE(st.message().find(head), std::string::npos) << c.file << ": wanted \"" << head << "\" in:\n" << st.message();
        EXPECT_NE(st.message().find(c.fragment), std::string::npos) << c.file << ": wanted \"" << c.fragment << "\" in:\n" << st.message();
    }
}

TEST(ConfigFile, EveryFixtureIsCoveredByATest) {
    std::set<std::string> known(std::begin(good_files), std::end(good_files));
    for (const BadCase & c : bad_cases) known.insert(c.file);
    DIR * d = opendir((moezip_test::repo_root() + "/fixtures/config").c_str());
    ASSERT_NE(d, nullptr);
    int n = 0;
    while (dirent * e = readdir(d)) {
        std::string name = e->d_name;
        if (name.size() < 5 || name.substr(name.size() - 5) != ".toml") continue;
        ++n;
        EXPECT_TRUE(known.count(name)) << name << " is in fixtures/config/ but no test names it";
    }
    closedir(d);
    EXPECT_EQ(n, (int) known.size());
}

TEST(ConfigFile, DuplicateQuotedTableIsNotGarbled) {
    Config cfg;
    Status st = config_load_file(fixture("duplicate_quoted_table.toml"), cfg);
    // toml++ 3.3.0 itself says '"rorows"' here.
    EXPECT_EQ(st.message().find("rorows"), std::string::npos) << st.message();
}

TEST(ConfigFile, SeveralProblemsAreAllReportedInLineOrder) {
    Config cfg;
    Status st = config_load_string("log = \"loud\"\nthreads = 999\n[dispatch]\nbogus = 1\n", "m.toml", cfg);
    ASSERT_FALSE(st.is_ok());
    size_t a = st.message().find("m.toml:1: log:");
    size_t b = st.message().find("m.toml:2: threads: expected integer 0..256, got 999");
    size_t c = st.message().find("m.toml:4: dispatch.bogus: unknown key");
    ASSERT_NE(a, std::string::npos) << st.message();
    ASSERT_NE(b, std::string::npos) << st.message();
    ASSERT_NE(c, std::string::npos) << st.message();
    EXPECT_LT(a, b);
    EXPECT_LT(b, c);
}

// Found by tests/fuzz/config_fuzz.cpp: toml++ echoes the line break it read ("saw 'tr<LF>'"), which
// split one problem over two log lines, the second without file or prefix.
TEST(ConfigFile, SyntaxErrorIsOneLineEvenWhenTomlppEchoesALineBreak) {
    Config cfg;
    Status st = config_load_string("mode = \"observe\"\nno_repack = tr\ne\n", "m.toml", cfg);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("m.toml:2:15: no_repack: not valid TOML (boolean: expected 'true', saw 'tr\\n') in line: no_repack = tr"),
              std::string::npos) << st.message();
}

// Found by tests/fuzz/config_fuzz.cpp: an expert range or a quoted key holding a line break (a TOML
// "\n" escape) was copied into the message as it was, splitting one problem over two lines.
TEST(ConfigFile, ValuesAndKeysWithLineBreaksStayOnOneMessageLine) {
    Config cfg;
    Status st = config_load_string("[experts]\nlocal = \"1\\n2\"\n\"bad\\nkey\" = 1\n", "m.toml", cfg);
    ASSERT_FALSE(st.is_ok());
    const std::string & m = st.message();
    EXPECT_EQ(std::count(m.begin(), m.end(), '\n'), 1) << m;
    EXPECT_NE(m.find("m.toml:2: experts.local: expected expert ranges like \"0-3,8\", got \"1\\u000a2\" (\"1\\u000a2\": expected an expert id"),
              std::string::npos) << m;
    EXPECT_NE(m.find("\nm.toml:3: experts.\"bad\\u000akey\": unknown key"), std::string::npos) << m;
}

TEST(ConfigFile, RowsFixtureResolvesEveryField) {
    Config cfg = load_good("rows_two_workers.toml");
    EXPECT_EQ(cfg.mode, ConfigMode::rows);
    EXPECT_EQ(cfg.report_flush_ms, 0);
    EXPECT_EQ(cfg.log, LogLevel::warn);
    EXPECT_DOUBLE_EQ(cfg.rows.local_share, 0.5);
    EXPECT_EQ(cfg.rows.min_rows, 4);
    ASSERT_EQ(cfg.workers.size(), 2u);
    EXPECT_EQ(cfg.workers[0].endpoint, "tcp://127.0.0.1:5601");
    EXPECT_DOUBLE_EQ(cfg.workers[0].share, 0.25);
    EXPECT_EQ(cfg.workers[0].timeout_ms, 2000);   // inherited from [dispatch]
    EXPECT_FALSE(cfg.workers[0].has_timeout);
    EXPECT_EQ(cfg.workers[1].timeout_ms, 800);    // its own
    EXPECT_EQ(cfg.workers[1].line, 19);
    EXPECT_EQ(config_report_path(cfg, 4242), "moezip-report.4242.json");
}

TEST(ConfigFile, TraceIsOffByDefaultAndItsPathTakesThePid) {
    Config def;
    EXPECT_EQ(def.trace, "");
    EXPECT_EQ(config_trace_path(def, 7), "");
    EXPECT_EQ(def.trace_max_events, 100000);
    Config cfg;
    ASSERT_TRUE(config_load_string("trace = \"t/%p.trace.%p.json\"\ntrace_max_events = 12\n", "t.toml", cfg).is_ok());
    EXPECT_EQ(config_trace_path(cfg, 4242), "t/4242.trace.4242.json");
    EXPECT_EQ(cfg.trace_max_events, 12);
    // the trace changes what the run writes, so it is part of the resolved config and its digest
    EXPECT_NE(config_describe(cfg).find("trace = \"t/%p.trace.%p.json\""), std::string::npos) << config_describe(cfg);
    EXPECT_NE(config_digest(cfg), config_digest(def));
}

TEST(ConfigFile, ExpertsFixtureResolvesOwnership) {
    Config cfg = load_good("experts_split.toml");
    EXPECT_EQ(cfg.mode, ConfigMode::experts);
    EXPECT_TRUE(cfg.no_repack);
    EXPECT_EQ(expert_ranges_format(cfg.experts.local), "0-3,8");
    ASSERT_EQ(cfg.workers.size(), 2u);
    EXPECT_EQ(expert_ranges_format(cfg.workers[1].experts), "9-15");
    EXPECT_TRUE(cfg.worker_server.present);
    EXPECT_EQ(cfg.worker_server.bind, "tcp://*:5601");
    EXPECT_TRUE(config_check_expert_coverage(cfg, 16).is_ok());
}

TEST(ConfigFile, ReplicasLetTwoHostsOwnAnExpert) {
    Config cfg;
    Status st = config_load_string("mode = \"experts\"\n[experts]\nlocal = \"0-7\"\nreplicas = true\n"
                                   "[[worker]]\nendpoint = \"ipc:///tmp/a\"\nexperts = \"0-7\"\n"
                                   "[[worker]]\nendpoint = \"ipc:///tmp/b\"\nexperts = \"4-7\"\n", "r.toml", cfg);
    ASSERT_TRUE(st.is_ok()) << st.message();
    EXPECT_TRUE(cfg.experts.replicas);
    EXPECT_TRUE(config_check_expert_coverage(cfg, 8).is_ok());
    EXPECT_NE(config_describe(cfg).find("experts.replicas = true"), std::string::npos) << config_describe(cfg);
}

TEST(ConfigFile, CoverageNamesFirstUnownedExpert) {
    Config cfg = load_good("experts_split.toml");
    Status st = config_check_expert_coverage(cfg, 20);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("expert 16 has no owner"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("experts_split.toml:7: experts.local"), std::string::npos) << st.message();
}

TEST(ConfigFile, CoverageNamesExpertBeyondTheModel) {
    Config cfg = load_good("experts_split.toml");
    Status st = config_check_expert_coverage(cfg, 12);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("experts_split.toml:16: worker[1].experts: expert 12 does not exist"), std::string::npos)
        << st.message();
}

TEST(ConfigFile, DefaultsWhenFileIsMinimal) {
    Config cfg = load_good("observe_minimal.toml");
    Config def;
    EXPECT_EQ(config_describe(cfg), config_describe(def));
    EXPECT_EQ(cfg.mode, ConfigMode::observe);
    EXPECT_EQ(cfg.report, "moezip-report.%p.json");
    EXPECT_EQ(cfg.dispatch.timeout_ms, 5000);
}

TEST(ConfigFile, MissingFileIsIoErrorNamingThePath) {
    Config cfg;
    std::string path = moezip_test::test_dir("config_missing") + "/nope.toml";
    Status st = config_load_file(path, cfg);
    EXPECT_EQ(st.code(), Status::Code::io_error);
    EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("No such file"), std::string::npos) << st.message();
}

TEST(ConfigFile, DirectoryIsIoError) {
    Config cfg;
    Status st = config_load_file(moezip_test::repo_root() + "/fixtures/config", cfg);
    EXPECT_EQ(st.code(), Status::Code::io_error);
    EXPECT_NE(st.message().find("not a regular file"), std::string::npos) << st.message();
}

TEST(ConfigFile, BadFileKeepsStrictAndLogForTheCaller) {
    Config cfg;
    Status st = config_load_string("strict = true\nlog = \"debug\"\nmode = \"nope\"\n", "s.toml", cfg);
    ASSERT_FALSE(st.is_ok());
    EXPECT_TRUE(cfg.strict);
    EXPECT_EQ(cfg.log, LogLevel::debug);
    EXPECT_EQ(cfg.mode, ConfigMode::observe);
}

TEST(ConfigDescribe, SameSettingsWrittenDifferentlyGiveSameTextAndDigest) {
    Config a = load_good("rows_two_workers.toml");
    Config b;
    const char * other =
        "# same settings, other order and spelling\n"
        "log = 'warn'\nreport_flush_ms = 0\nmode = \"rows\"\n"
        "dispatch = { on_worker_error = \"local\", timeout_ms = 2000 }\n"
        "rows.min_rows = 4\nrows.local_share = 0.50\n"
        "worker = [ { endpoint = \"tcp://127.0.0.1:5601\", share = 0.25 },\n"
        "           { endpoint = \"ipc:///tmp/moezip-worker-2.sock\", share = 2.5e-1, timeout_ms = 800 } ]\n";
    ASSERT_TRUE(config_load_string(other, "other.toml", b).is_ok());
    EXPECT_EQ(config_describe(a), config_describe(b));
    EXPECT_EQ(config_digest(a), config_digest(b));
}

TEST(ConfigDescribe, TextIsOneKeyPerLineWithResolvedValues) {
    Config cfg = load_good("rows_two_workers.toml");
    std::string d = config_describe(cfg);
    EXPECT_NE(d.find("mode = \"rows\"\n"), std::string::npos) << d;
    EXPECT_NE(d.find("rows.local_share = 0.5\n"), std::string::npos) << d;
    EXPECT_NE(d.find("worker[0].timeout_ms = 2000\n"), std::string::npos) << d;
    EXPECT_NE(d.find("worker[1].endpoint = \"ipc:///tmp/moezip-worker-2.sock\"\n"), std::string::npos) << d;
    EXPECT_EQ(config_describe(cfg), config_describe(load_good("rows_two_workers.toml")));
}

TEST(ConfigDescribe, DigestChangesWithAnyValue) {
    Config a = load_good("rows_two_workers.toml");
    Config b = a;
    b.workers[1].timeout_ms = 801;
    Config c = a;
    c.no_repack = true;
    EXPECT_NE(config_digest(a), config_digest(b));
    EXPECT_NE(config_digest(a), config_digest(c));
    EXPECT_EQ(config_digest(a), config_digest(load_good("rows_two_workers.toml")));
}

TEST(ConfigFile, RandomBytesNeverThrowOrPass) {
    std::mt19937 rng(7);
    const std::string alphabet = "[]=\"'.#\n \t{}abc0123456789-+,_\\\x01\xff";
    for (int i = 0; i < 500; ++i) {
        std::string text;
        int n = (int) (rng() % 64);
        for (int j = 0; j < n; ++j) text += alphabet[rng() % alphabet.size()];
        Config cfg;
        Status st;
        EXPECT_NO_THROW(st = config_load_string(text, "r.toml", cfg));
        if (!st.is_ok()) {
            EXPECT_EQ(st.message().compare(0, 7, "r.toml:"), 0) << st.message();
        }
    }
}

TEST(ExpertRanges, ParseAndFormatRoundTrip) {
    std::vector<ExpertRange> r;
    ASSERT_TRUE(expert_ranges_parse(" 0-3, 8 ,10-11", r).is_ok());
    EXPECT_EQ(expert_ranges_format(r), "0-3,8,10-11");
    EXPECT_EQ(expert_ranges_count(r), 7);
    EXPECT_TRUE(expert_ranges_contains(r, 8));
    EXPECT_FALSE(expert_ranges_contains(r, 9));
    ASSERT_TRUE(expert_ranges_parse("", r).is_ok());
    EXPECT_TRUE(r.empty());
}

TEST(ExpertRanges, RejectsMalformedItems) {
    std::vector<ExpertRange> r;
    EXPECT_NE(expert_ranges_parse("-1", r).message().find("non-negative"), std::string::npos);
    EXPECT_NE(expert_ranges_parse("1,,2", r).message().find("empty item"), std::string::npos);
    EXPECT_NE(expert_ranges_parse("0-3,2", r).message().find("expert 2 is listed twice"), std::string::npos);
    EXPECT_NE(expert_ranges_parse("a-b", r).message().find("expected an expert id"), std::string::npos);
    EXPECT_NE(expert_ranges_parse("70000", r).message().find("expected an expert id"), std::string::npos);
}

// experts.copy_local's default depends on the mode (docs/config.md): on in mode experts, off in mode
// local (whose job is to show what the interception costs), and what the file says in either.
TEST(ConfigFile, CopyLocalDefaultsOnInExpertsModeAndOffInLocalMode) {
    Config cfg;
    ASSERT_TRUE(config_load_string("mode = \"local\"\n", "t.toml", cfg));
    EXPECT_FALSE(cfg.experts.copy_local);
    ASSERT_TRUE(config_load_string("mode = \"local\"\n[experts]\ncopy_local = true\n", "t.toml", cfg));
    EXPECT_TRUE(cfg.experts.copy_local);
    ASSERT_TRUE(config_load_string("mode = \"experts\"\n[experts]\nlocal = \"0-3\"\n[[worker]]\nendpoint = \"tcp://127.0.0.1:5601\"\nexperts = \"4-7\"\n",
                                   "t.toml", cfg));
    EXPECT_TRUE(cfg.experts.copy_local);
    ASSERT_TRUE(config_load_string("mode = \"experts\"\n[experts]\nlocal = \"0-3\"\ncopy_local = false\n[[worker]]\n"
                                   "endpoint = \"tcp://127.0.0.1:5601\"\nexperts = \"4-7\"\n", "t.toml", cfg));
    EXPECT_FALSE(cfg.experts.copy_local);
}

// copy_local under observe, rows or shard was ignored without a word,
// so a user who asked for huge pages got the mapping.
TEST(ConfigFile, CopyLocalInAModeThatMakesNoCopyNamesTheKeyAndTheMode) {
    for (const char * mode : {"observe", "rows", "shard"}) {
        Config cfg;
        Status st = config_load_string(std::string("mode = \"") + mode + "\"\n[experts]\ncopy_local = true\n", "t.toml", cfg);
        ASSERT_FALSE(st.is_ok()) << mode;
        EXPECT_NE(st.message().find("t.toml:3: experts.copy_local: only used in modes \"experts\" and \"local\", got mode = \"" +
                                    std::string(mode) + "\""), std::string::npos) << st.message();
    }
    // not set: nothing to say in any mode
    Config cfg;
    EXPECT_TRUE(config_load_string("mode = \"observe\"\n[experts]\nlocal = \"0-3\"\n", "t.toml", cfg));
}
