// Tests of what toml++ 3.3.0 could not survive (coordinator/config/config_precheck.cpp and the
// TOML_ASSERT guard in config.cpp): each such text is a named error, never an abort, a crash or a hang.
#include "coordinator/config/config.h"
#include "coordinator/config/config_internal.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

using namespace moezip;

namespace {

std::string utf8(long cp) {
    std::string s;
    if (cp < 0x80) s += (char) cp;
    else if (cp < 0x800) s += {(char) (0xC0 | (cp >> 6)), (char) (0x80 | (cp & 0x3F))};
    else if (cp < 0x10000) s += {(char) (0xE0 | (cp >> 12)), (char) (0x80 | ((cp >> 6) & 0x3F)), (char) (0x80 | (cp & 0x3F))};
    else s += {(char) (0xF0 | (cp >> 18)), (char) (0x80 | ((cp >> 12) & 0x3F)), (char) (0x80 | ((cp >> 6) & 0x3F)), (char) (0x80 | (cp & 0x3F))};
    return s;
}

std::string code_name(long cp) {
    char buf[16];
    snprintf(buf, sizeof buf, "U+%04lX", (unsigned long) cp);
    return buf;
}

Status load(const std::string & text, Config & cfg) { return config_load_string(text, "p.toml", cfg); }

} // namespace

// is_non_ascii_horizontal_whitespace() of toml++ 3.3.0 reaches __builtin_unreachable for these three
// blocks; each code point of them, and one on each side, is an error naming it, outside a string and
// after a backslash in a multi-line string.
TEST(ConfigPrecheck, CodePointsToml330CannotClassifyAreNamedErrors) {
    const long blocks[3][2] = {{0xA0, 0x49A}, {0x2C7D, 0x3078}, {0xFBC5, 0xFF00}};
    int checked = 0;
    for (const auto & b : blocks) {
        for (long cp = b[0]; cp <= b[1]; ++cp) {
            const std::string ch = utf8(cp);
            Config cfg;
            Status st = load("mode = \"observe\"\nx" + ch + " = 1\n", cfg);
            ASSERT_FALSE(st.is_ok()) << code_name(cp);
            EXPECT_NE(st.message().find("p.toml:2:2: "), std::string::npos) << st.message();
            EXPECT_NE(st.message().find("(" + code_name(cp) + ") outside a string or comment"), std::string::npos) << st.message();
            st = load("report = \"\"\"a\\" + ch + "\"\"\"\n", cfg);
            EXPECT_NE(st.message().find("(" + code_name(cp) + ") after a backslash"), std::string::npos) << st.message();
            st = load("report = \"\"\"a\\\n  " + ch + "b\"\"\"\n", cfg);
            EXPECT_NE(st.message().find("p.toml:2:3: report: not valid TOML ('" + ch + "' (" + code_name(cp) +
                                        ") as the first character after a line-ending backslash"), std::string::npos)
                << st.message();
            ++checked;
        }
    }
    EXPECT_EQ(checked, 0x3FB + 0x3FC + 0x33C);
}

TEST(ConfigPrecheck, NonAsciiInStringsAndCommentsIsAccepted) {
    Config cfg;
    const std::string text =
        "# configuration de l'h\xc3\xb4te \xe2\x80\x94 \xd0\xbf\xd1\x80\xd0\xb8\xd0\xbc\xd0\xb5\xd1\x80\n"
        "report = \"rapport-\xc3\xa9t\xc3\xa9.json\"  # \xc3\xa9\n"
        "[worker_server]\n"
        "model = '''/mod\xc3\xa8les/\n\xc3\xa9t\xc3\xa9.gguf'''\n"
        "[\"rows\"]\n"
        "min_rows = 3\n";
    Status st = load(text, cfg);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(cfg.report, "rapport-\xc3\xa9t\xc3\xa9.json");
    EXPECT_EQ(cfg.worker_server.model, "/mod\xc3\xa8les/\n\xc3\xa9t\xc3\xa9.gguf");
    EXPECT_EQ(cfg.rows.min_rows, 3);
    // a line-ending backslash followed by ASCII, then non-ASCII, is fine
    st = load("report = \"\"\"r-\\\n   x\xc3\xa9.json\"\"\"\n", cfg);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(cfg.report, "r-x\xc3\xa9.json");
}

TEST(ConfigPrecheck, ClosingBraceWhereAnArrayExpectsAValueNamesTheKey) {
    Config cfg;
    Status st = load("mode = \"rows\"\n[[worker]]\nendpoint = \"tcp://10.0.0.2:5601\"\nshare = [1, }\n", cfg);
    EXPECT_NE(st.message().find("p.toml:4:13: worker[0].share: not valid TOML (expected a value or ']' in the array, saw '}')"),
              std::string::npos) << st.message();
    // the array starts lines above, with a comment between '[' and '}'
    st = load("mode = \"rows\"\nworker = [\n  # none yet\n}\n", cfg);
    EXPECT_NE(st.message().find("p.toml:4:1: worker: not valid TOML (expected a value"), std::string::npos) << st.message();
    // in an inline table a dangling comma is toml++'s own error, not an abort
    st = load("dispatch = { timeout_ms = 5, }\n", cfg);
    EXPECT_NE(st.message().find("p.toml:1:"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("dangling comma"), std::string::npos) << st.message();
}

TEST(ConfigPrecheck, HeaderWithoutNameIsNamedOnlyOutsideStrings) {
    Config cfg;
    for (const char * bad : {"[}", "[.]", "[ # c", "[", "[[ [a]]", "[[}"}) {
        Status st = load(std::string("mode = \"observe\"\n") + bad + "\n", cfg);
        EXPECT_NE(st.message().find("p.toml:2:"), std::string::npos) << bad << ": " << st.message();
        EXPECT_NE(st.message().find("a table header needs a name"), std::string::npos) << bad << ": " << st.message();
    }
    // the same text inside a multi-line string is content, not a header (it was refused before)
    Status st = load("report = '''\n[}'''\n", cfg);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(cfg.report, "[}");
}

TEST(ConfigPrecheck, KeyOfManyPartsIsAnErrorNotAStackOverflow) {
    std::string key = "a";
    for (int i = 0; i < 400000; ++i) key += ".a";
    Config cfg;
    Status st = load(key + " = 1\n", cfg);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("p.toml:1:32: a.a.a"), std::string::npos) << st.message().substr(0, 300);
    EXPECT_NE(st.message().find("a key of more than 16 dotted parts"), std::string::npos) << st.message().substr(0, 300);
    EXPECT_LT(st.message().size(), 400u) << "the key is shortened in the message";
    std::string arrays(2000, '[');
    st = load("x = " + arrays + "\n", cfg);
    EXPECT_NE(st.message().find("p.toml:1:21: x: not valid TOML (arrays and inline tables nested more than 16 deep"),
              std::string::npos) << st.message().substr(0, 300);
}

// Found by tests/fuzz/config_fuzz.cpp: toml++ reads a number, date or boolean up to a value terminator,
// quotes included, and asks is_value_terminator of every character on the way; a quote there does not
// start a string.
TEST(ConfigPrecheck, QuoteInsideANumberOrDateDoesNotStartAString) {
    Config cfg;
    for (const char * value : {"1\"x\"\xc3\xa9", "8=\"o\"1979-05-\xc3\xa9r", "1979-05-27 07:32\"\xc3\xa9\"", "tru\"\xc3\xa9\""}) {
        Status st = load(std::string("mode = \"observe\"\nthreads = ") + value + "\n", cfg);
        ASSERT_FALSE(st.is_ok()) << value;
        EXPECT_NE(st.message().find("p.toml:2:"), std::string::npos) << st.message();
        EXPECT_NE(st.message().find("threads: not valid TOML ('\xc3\xa9' (U+00E9) in a value that is not a string"), std::string::npos)
            << st.message();
    }
    // in an array too, and a string after a value terminator is still a string
    Status st = load("x = [1, 2\"\xc3\xa9\"]\n", cfg);
    EXPECT_NE(st.message().find("(U+00E9) in a value that is not a string"), std::string::npos) << st.message();
    st = load("report = \"\xc3\xa9.json\"\nthreads = 2 # \"\xc3\xa9\"\n", cfg);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(cfg.threads, 2);
}

// Found by tests/fuzz/config_fuzz.cpp: toml++ 3.3.0 asserts in parse_time when the character after
// a date-time's 'T' is not a digit ...
TEST(ConfigPrecheck, DateTimeWithoutDigitsAfterTOrSpaceIsNamed) {
    Config cfg;
    for (const char * value : {"1979-05-27Tw07:32:00Z", "1979-05-27t:07:32", "[1979-05-27Tx07:32]"}) {
        Status st = load(std::string("x = ") + value + "\n", cfg);
        EXPECT_NE(st.message().find("p.toml:1:"), std::string::npos) << st.message();
        EXPECT_NE(st.message().find("x: not valid TOML (a date-time needs the time's digits right after"), std::string::npos)
            << value << ": " << st.message();
    }
    // ... and, in its scan for a date-time with a space, when a lone digit follows the space; the
    // scan also reads on over the space, so a quote after it starts no string
    for (const char * value : {"1979-05-27 1", "1979-05-ne 1", "[1979-05-27 1]", "1979-05-ne 1 \"\xc3\xa9\""}) {
        Status st = load(std::string("x = ") + value + "\n", cfg);
        EXPECT_NE(st.message().find("p.toml:1:"), std::string::npos) << st.message();
        EXPECT_NE(st.message().find("x: not valid TOML (a single digit after a value and a space"), std::string::npos)
            << value << ": " << st.message();
    }
    for (const char * value : {"1979-05-ne 12\"\xc3\xa9\"", "1979-05-ne 1\"\xc3\xa9\""}) {
        Status st = load(std::string("x = ") + value + "\n", cfg);
        EXPECT_NE(st.message().find("(U+00E9) in a value that is not a string"), std::string::npos) << st.message();
    }
    Status st = load("x = 1979-05-27T07:32:00Z\ny = 1979-05-27 07:32:00\n", cfg);
    EXPECT_EQ(st.message().find("date-time needs"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("p.toml:1: x: unknown key"), std::string::npos) << st.message();
}

TEST(ConfigPrecheck, InvalidUtf8OutsideStringsIsTheUtf8Message) {
    Config cfg;
    Status st = load("mode = \"observe\"\nx\xff = 1\n", cfg);
    EXPECT_NE(st.message().find("p.toml:2:2: not a UTF-8 text file"), std::string::npos) << st.message();
}

// The first problem of the file is reported, whether toml++ or the precheck finds it.
TEST(ConfigPrecheck, AnEarlierSyntaxErrorComesFirst) {
    Config cfg;
    Status st = load("threads = 1 2\nmode = [}\n", cfg);
    EXPECT_NE(st.message().find("p.toml:1:"), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find("p.toml:2:"), std::string::npos) << st.message();
    // an array still open when toml++ reaches the cut is not an "end-of-file" error
    st = load("mode = \"rows\"\nx = [\n  1,\n}\n", cfg);
    EXPECT_NE(st.message().find("p.toml:4:1: x: not valid TOML (expected a value or ']'"), std::string::npos) << st.message();
}

// strict, log, require_intercept and report written above a syntax error still apply, so the host
// can follow the documented policy (strict = true: exit 3).
TEST(ConfigPrecheck, SyntaxErrorKeepsThePolicyKeysWrittenAboveIt) {
    Config cfg;
    Status st = load("strict = true\nlog = \"debug\"\nrequire_intercept = true\nreport = \"r.json\"\nmode = [}\n", cfg);
    ASSERT_FALSE(st.is_ok());
    EXPECT_TRUE(cfg.strict);
    EXPECT_EQ(cfg.log, LogLevel::debug);
    EXPECT_TRUE(cfg.require_intercept);
    EXPECT_EQ(cfg.report, "r.json");
    EXPECT_EQ(cfg.mode, ConfigMode::observe);
    st = load("strict = true\nmode = \"local\"\nthreads = 1 2\n", cfg);  // toml++'s own syntax error
    ASSERT_FALSE(st.is_ok());
    EXPECT_TRUE(cfg.strict);
    EXPECT_EQ(cfg.mode, ConfigMode::observe);
    st = load("mode = [}\nstrict = true\n", cfg);  // below the error: not read
    ASSERT_FALSE(st.is_ok());
    EXPECT_FALSE(cfg.strict);
    st = load("strict = \"yes\"\nmode = [}\n", cfg);  // not itself valid: default
    EXPECT_FALSE(cfg.strict);
}

// Without the precheck, toml++ 3.3.0 fails its own check on "mode = [}" (parse_value) and would have
// called abort(); the guard makes that an error naming the file and line.
TEST(ConfigToml, FailedInternalCheckIsANamedErrorNotAnAbort) {
    const uint64_t failed_before = config_toml_checks_failed();
    std::string m = config_toml_only("report = \"r.json\"\n\nmode = [}\nthreads = 2\n", "t.toml");
    EXPECT_NE(m.find("t.toml:3: mode: not valid TOML (toml++ 3.3.0 stopped on an internal check: !is_value_terminator(*cp))"),
              std::string::npos) << m;
    m = config_toml_only("mode = \"observe\"\n[}\n", "t.toml");
    EXPECT_NE(m.find("t.toml:2: not valid TOML (toml++ 3.3.0 stopped on an internal check: "), std::string::npos) << m;
    EXPECT_EQ(config_toml_only("mode = \"observe\"\n", "t.toml"), "");
    EXPECT_GT(config_toml_checks_failed(), failed_before);
}

// A long file with its error at the end: the message is built in one pass over the lines (it took
// minutes line by line, enough to stall a host at startup).
TEST(ConfigFile, ErrorAtTheEndOfALongFileNamesItsLine) {
    std::string text = "[dispatch]\n";
    for (int i = 0; i < 200000; ++i) text += "# filler\n";
    text += "timeout_ms =\n";
    Config cfg;
    Status st = load(text, cfg);
    EXPECT_NE(st.message().find("p.toml:200002:13: dispatch.timeout_ms: not valid TOML"), std::string::npos) << st.message();
}
