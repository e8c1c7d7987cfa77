// moezip-report show: a short human summary of a report (or of a moezip-run output).
#pragma once

#include "tools/moezip-report/report_file.h"

#include <string>

namespace moezip_report {

/// Summary lines: schema, mode and config, engine, graphs, logits, provider map, a per-layer table
/// (calls, rows, local/remote rows, passthrough, fallbacks, ms), checks, workers, errors. Sections
/// the document lacks are left out; values of an unexpected type print as JSON.
std::string show_document(const Document & d);

} // namespace moezip_report
