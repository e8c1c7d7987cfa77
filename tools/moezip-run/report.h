// moezip-run: what a run tells: the one-line summary on stderr and the --json report
// (schema "moezip-run/1", documented in docs/internals/moezip-run.md).
#pragma once

#include "provider_map/status.h"
#include "tools/moezip-run/generate.h"
#include "tools/moezip-run/run_options.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace moezip_run {

/// Everything a report is made from.
struct run_report {
    const run_options *      opts = nullptr;
    uint64_t                 model_bytes = 0;  ///< size of the model file, bytes
    uint32_t                 n_ctx = 0;        ///< context size used, tokens
    int32_t                  n_vocab = 0;      ///< logits per step
    std::vector<llama_token> prompt_tokens;    ///< [n_prompt]
    generate_result          result;
    std::string              text;             ///< generated text (special tokens not rendered)
};

/// "prefill N tokens X ms Y tok/s, decode M tokens X ms Y tok/s" (tok/s 0 when nothing was timed).
std::string report_summary_line(const generate_result & result);

/// The --json document, schema "moezip-run/1".
nlohmann::ordered_json report_json(const run_report & report);

/// Writes json to path atomically: path.tmp.<pid>, then rename over path.
/// Errors: io_error naming the file.
moezip::Status report_write_json(const std::string & path, const nlohmann::ordered_json & json);

} // namespace moezip_run
