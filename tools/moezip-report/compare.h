// moezip-report compare: are two runs' logits sequences the same?
#pragma once

#include "tools/moezip-report/report_file.h"

#include <string>

namespace moezip_report {

/// Exit codes of the tool (docs/report-tool.md).
enum exit_code { exit_equal = 0, exit_differ = 1, exit_error = 2 };

/// Outcome of a comparison: the exit code and the lines to print (stdout; `notes` to stderr).
struct CompareResult {
    int code = exit_error;
    std::string out;
    std::string notes;
};

/// Compares a and b (already loaded). Equal: same schema, same count and the same xxh3 at every
/// index (and, for reports, the same chain) -> exit_equal with "equal: N logits outputs, chain HEX".
/// Reports with more than one stream (engine contexts decoding at once) are compared stream by
/// stream, independent of how the contexts' graphs interleaved: equal when both have the same
/// multiset of (count, chain) streams -> "equal: N logits outputs in S streams ...".
/// Different -> exit_differ naming the first differing index, both hashes and both counts.
/// Different schemas -> exit_error: the two sequences mean different things.
CompareResult compare_documents(const Document & a, const Document & b);

} // namespace moezip_report
