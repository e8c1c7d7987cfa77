// moezip-report: compare the logits of two runs, or summarise one report.
//   moezip-report compare A.json B.json   exit 0 equal, 1 different, 2 unreadable/not comparable
//   moezip-report show A.json             exit 0, or 2 when the file cannot be read
// Both accept the preload's report ("moezip-report/1") and moezip-run's --json ("moezip-run/1");
// compare only compares documents of one schema. Reference: docs/report-tool.md.
#include "tools/moezip-report/compare.h"
#include "tools/moezip-report/show.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

using namespace moezip_report;

namespace {

int load_or_complain(const std::string & path, Document & d) {
    moezip::Status st = document_load(path, d);
    if (st.is_ok()) return exit_equal;
    fprintf(stderr, "moezip-report: error: %s\n", st.message().c_str());
    return exit_error;
}

int run_compare(const std::string & path_a, const std::string & path_b) {
    Document a, b;
    if (load_or_complain(path_a, a) != exit_equal || load_or_complain(path_b, b) != exit_equal) return exit_error;
    CompareResult r = compare_documents(a, b);
    fputs(r.out.c_str(), stdout);
    if (!r.notes.empty()) {
        std::string notes = r.notes;
        if (r.code == exit_error) notes = "moezip-report: error: " + notes;
        fputs(notes.c_str(), stderr);
    }
    return r.code;
}

int run_show(const std::string & path) {
    Document d;
    if (load_or_complain(path, d) != exit_equal) return exit_error;
    fputs(show_document(d).c_str(), stdout);
    return exit_equal;
}

int run(int argc, char ** argv) {
    CLI::App app{"moezip-report: compare the logits of two runs, or summarise a report"};
    app.footer("Exit codes: 0 = equal (compare) or shown; 1 = the logits differ; 2 = a file is unreadable,\n"
               "not JSON, of an unknown schema, or the two files have different schemas; also usage errors.");
    app.require_subcommand(1);
    std::string a, b;
    CLI::App * cmp = app.add_subcommand("compare", "exit 0 when both logits sequences are equal, 1 when not");
    cmp->add_option("A", a, "first report (moezip-report/1) or moezip-run --json output")->required();
    cmp->add_option("B", b, "second file, of the same schema as A")->required();
    CLI::App * show = app.add_subcommand("show", "print a short summary of a report");
    show->add_option("FILE", a, "report or moezip-run --json output")->required();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        int code = app.exit(e);
        return code == 0 ? 0 : exit_error;
    }
    return cmp->parsed() ? run_compare(a, b) : run_show(a);
}

} // namespace

int main(int argc, char ** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception & e) {
        fprintf(stderr, "moezip-report: error: %s\n", e.what());
        return exit_error;
    }
}
