// moezip-pagecache: measure or set the page-cache state of model files (coordinator/memory/page_cache.h).
//   moezip-pagecache state FILE...                   one JSON line per file: bytes, resident, PMD-mapped
//   moezip-pagecache set --fill kernel|huge|small FILE...  evict, read back, print the state as `state` does
//   moezip-pagecache evict FILE...
// Exit 0; 1 with "moezip-pagecache: error: <file>: <reason>" on stderr; CLI11's own codes (>= 100)
// for bad flags. docs/history/bench-runs.md ("The page cache decides the mapped single") says why a
// benchmark sets this before it times a run, and what a user gains from `set --fill huge`.
#include "coordinator/memory/page_cache.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

using moezip::PageCacheFill;
using moezip::PageCacheState;
using moezip::Status;

namespace {

int complain(const Status & st) {
    fprintf(stderr, "moezip-pagecache: error: %s\n", st.message().c_str());
    return 1;
}

int print_state(const std::string & path) {
    PageCacheState s;
    Status st = moezip::page_cache_state(path, s);
    if (!st) return complain(st);
    nlohmann::json j = {{"file", path},
                        {"file_bytes", s.file_bytes},
                        {"resident_bytes", s.resident_bytes},
                        {"pmd_mapped_bytes", s.pmd_mapped_bytes},
                        {"read_ahead_kb", s.read_ahead_kb}};
    printf("%s\n", j.dump().c_str());
    return 0;
}

} // namespace

int main(int argc, char ** argv) {
    CLI::App app{"Measure or set the page-cache state of model files"};
    app.require_subcommand(1);
    std::vector<std::string> files;
    PageCacheFill fill = PageCacheFill::kernel;
    const std::map<std::string, PageCacheFill> fills = {
        {"kernel", PageCacheFill::kernel}, {"huge", PageCacheFill::huge}, {"small", PageCacheFill::small}};

    CLI::App * state = app.add_subcommand("state", "print each file's page-cache state as one JSON line");
    state->add_option("files", files, "files")->required()->check(CLI::ExistingFile);
    CLI::App * evict = app.add_subcommand("evict", "drop each file's pages from the page cache");
    evict->add_option("files", files, "files")->required()->check(CLI::ExistingFile);
    CLI::App * set = app.add_subcommand("set", "evict each file, read it back, print its state");
    set->add_option("--fill", fill, "kernel: one pass through a mapping (the kernel's readahead chooses "
                                    "the folio sizes); huge: the same, advised MADV_HUGEPAGE (2 MiB folios where "
                                    "the filesystem has large folios); small: reads without readahead, 4 KiB folios")
        ->transform(CLI::CheckedTransformer(fills, CLI::ignore_case))
        ->required();
    set->add_option("files", files, "files")->required()->check(CLI::ExistingFile);
    CLI11_PARSE(app, argc, argv);

    for (const std::string & f : files) {
        if (*evict || *set) {
            Status st = moezip::page_cache_evict(f);
            if (!st) return complain(st);
        }
        if (*set) {
            Status st = moezip::page_cache_fill(f, fill);
            if (!st) return complain(st);
        }
        if ((*state || *set) && print_state(f) != 0) return 1;
    }
    return 0;
}
