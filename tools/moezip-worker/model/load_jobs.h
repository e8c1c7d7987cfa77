// moezip-worker: runs the jobs of a load (read one expert tensor's served slices, hash them) on a few
// threads, so that one thread's copying and hashing overlap another's waiting for the disk.
#pragma once

#include "provider_map/status.h"

#include <functional>
#include <vector>

namespace moezip {

/// Threads a load uses: the machine's hardware threads, at least 1 and at most 4 (more do not read
/// one disk faster; the hashing they overlap is a fraction of the reading).
int load_jobs_threads();

/// Runs every job, each once, on n_threads threads (1: on the calling thread, in order). After the
/// first job that fails no further job starts; returns that job's Status (the one with the lowest
/// index when several failed at once), ok when all succeeded. Jobs must touch disjoint data.
Status load_jobs_run(const std::vector<std::function<Status()>> & jobs, int n_threads);

} // namespace moezip
