// moezip-report: reading the two JSON documents the tool compares and shows.
//   "moezip-report/1": the preload's report (coordinator/evidence/evidence.cpp); `logits.graphs[i].xxh3` is
//     XXH3-64 of the whole logits output of the i-th graph that produced logits ([n_vocab, rows] f32),
//     `logits.chain_xxh3` chains them: chain = XXH3_64bits_withSeed(&xxh3_i, 8, seed = chain), from 0.
//     With several engine contexts (one ggml_backend_sched each) `logits.streams` gives each context's
//     own count and chain, and each listed graph its `stream`: contexts decoding at once interleave
//     their graphs in any order, their own sequences do not depend on it.
//   "moezip-run/1": moezip-run's --json (docs/internals/moezip-run.md); `logits_xxh3[i]` is XXH3-64 of the one
//     logits row ([n_vocab] f32) that step i sampled from.
// The two sequences measure different things, so only documents of one schema are compared.
#pragma once

#include "provider_map/status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace moezip_report {

extern const char * const schema_report;  ///< "moezip-report/1"
extern const char * const schema_run;     ///< "moezip-run/1"

/// One logits output: its ordinal and hash, plus the shape when the document gives it (else -1).
struct LogitsEntry {
    uint64_t index = 0;
    uint64_t stream = 0;   ///< report: the engine context's stream (0 when the report has none)
    uint64_t xxh3 = 0;
    int64_t n_vocab = -1;
    int64_t rows = -1;
};

/// A loaded document: its schema, its logits sequence and the whole JSON (for `show`).
struct Document {
    std::string path;
    std::string schema;
    bool complete = true;              ///< report: false when written by a periodic flush mid-run
    uint64_t count = 0;                ///< logits outputs in the run (entries may list fewer)
    std::vector<LogitsEntry> entries;  ///< listed outputs, indices strictly increasing
    uint64_t chain = 0;                ///< report: logits.chain_xxh3; run: computed the same way
    bool chain_matches_entries = true; ///< report listing all outputs: chain recomputed == chain_xxh3
    /// report: per stream (engine context) its count and chain, in stream id order (empty for
    /// reports written before streams existed and for moezip-run outputs)
    std::vector<std::pair<uint64_t, uint64_t>> streams;
    nlohmann::json json;
};

/// Reads and validates `path`. Errors (message starts with the path): unreadable file, not JSON,
/// not an object, missing/unknown schema, a logits section of the wrong shape (names the field).
moezip::Status document_load(const std::string & path, Document & out);

/// XXH3 chain of hashes as the report computes it (see the file comment).
uint64_t logits_chain(const std::vector<LogitsEntry> & entries);

/// "%016llx".
std::string hex16(uint64_t v);

} // namespace moezip_report
