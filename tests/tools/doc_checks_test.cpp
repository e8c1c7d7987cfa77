// The two checks `make test` runs over the tracked text (tools/checks/): the wording check fails on a
// line that speaks of how the project was made and names FILE:LINE; the link check fails on a
// relative Markdown link or #anchor that does not resolve. Each is tried on small files written
// here, then run over the whole tree, which must pass both.
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <fstream>

using moezip_test::file_exists;
using moezip_test::repo_root;
using moezip_test::run_command;
using moezip_test::test_dir;

namespace {

std::string write_file(const std::string & path, const std::string & text) {
    std::ofstream(path) << text;
    return path;
}

moezip_test::CommandResult wording(const std::vector<std::string> & files) {
    std::vector<std::string> argv = {repo_root() + "/tools/checks/check-wording.sh"};
    argv.insert(argv.end(), files.begin(), files.end());
    return run_command(argv, {}, 120);
}

moezip_test::CommandResult links(const std::vector<std::string> & files) {
    std::vector<std::string> argv = {"node", repo_root() + "/tools/checks/check-links.js"};
    argv.insert(argv.end(), files.begin(), files.end());
    return run_command(argv, {}, 120);
}

bool in_git_checkout() { return file_exists(repo_root() + "/.git"); }

}  // namespace

TEST(WordingCheck, NamesFileAndLineOfAWorkPeriodAndATrackerNumber) {
    std::string dir = test_dir("wording_check_names");
    std::string f = write_file(dir + "/note.md",
                               "# Results\n"
                               "Decode 1.12x, measured in the 9th session.\n"
                               "A fault first seen in issue 14.\n"
                               "Decode 1.12x (2026-12-07, commit 6dafbe8, 2-core Debian 12 VM).\n");
    auto r = wording({f});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find(f + ":2:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(f + ":3:"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(f + ":4:"), std::string::npos) << "a dated result is not flagged: " << r.out;
    EXPECT_NE(r.err.find("2 line(s)"), std::string::npos) << r.err;
}

TEST(WordingCheck, FlagsEveryKindOfMakingWord) {
    std::string dir = test_dir("wording_check_kinds");
    const std::vector<std::string> lines = {
        "found by a breaker", "breaker helper-36 saw it", "the reviewer asked", "the third sitting",
        "as the issue says", "on this VM it is slower", "shared with other engineers' builds",
        "work of the next session"};
    for (size_t i = 0; i < lines.size(); ++i) {
        std::string f = write_file(dir + "/f" + std::to_string(i) + ".txt", lines[i] + "\n");
        auto r = wording({f});
        EXPECT_EQ(r.exit_code, 1) << "not flagged: \"" << lines[i] << "\": " << r.out;
    }
}

TEST(WordingCheck, AllowsThePreloadsSessionObject) {
    std::string dir = test_dir("wording_check_allow");
    std::string f = write_file(dir + "/ok.md",
                               "The report is written by the process that started the preload's session\n"
                               "(preload/session.cpp); a CURVE handshake, an issue of the config.\n");
    auto r = wording({f});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST(WordingCheck, TrackedFilesSpeakOnlyOfTheProject) {
    if (!in_git_checkout()) GTEST_SKIP() << "not a git checkout: no tracked files to check";
    auto r = wording({});
    EXPECT_EQ(r.exit_code, 0) << "offending lines:\n" << r.out << r.err;
}

TEST(LinkCheck, NamesABrokenFileLinkAndABrokenAnchor) {
    std::string dir = test_dir("link_check_names");
    write_file(dir + "/target.md", "# Target\n## Worker memory (`--mmap`)\ntext\n");
    std::string f = write_file(dir + "/doc.md",
                               "See [the target](target.md) and [memory](target.md#worker-memory---mmap).\n"
                               "A [missing file](gone.md) here.\n"
                               "A [missing heading](target.md#no-such-heading) there.\n"
                               "```sh\n"
                               "echo [not a link](nowhere.md)\n"
                               "```\n");
    auto r = links({f});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_EQ(r.out.find(f + ":1:"), std::string::npos) << "good links flagged: " << r.out;
    EXPECT_NE(r.out.find(f + ":2: gone.md"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(f + ":3: target.md#no-such-heading"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("nowhere.md"), std::string::npos) << "a code block was checked: " << r.out;
}

TEST(LinkCheck, EveryRelativeLinkInTheTreeResolves) {
    if (!in_git_checkout()) GTEST_SKIP() << "not a git checkout: no tracked files to check";
    auto r = links({});
    EXPECT_EQ(r.exit_code, 0) << "broken links:\n" << r.out << r.err;
    EXPECT_NE(r.out.find("links in"), std::string::npos) << r.out;
}
