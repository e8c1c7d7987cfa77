#include "tools/moezip-worker/model/load_jobs.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace moezip {

int load_jobs_threads() {
    const unsigned hw = std::thread::hardware_concurrency();
    return (int) std::min(4u, std::max(1u, hw));
}

Status load_jobs_run(const std::vector<std::function<Status()>> & jobs, int n_threads) {
    std::vector<Status> results(jobs.size(), Status::ok());
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    auto work = [&]() {
        for (size_t i = next++; i < jobs.size() && !failed.load(); i = next++) {
            results[i] = jobs[i]();
            if (!results[i]) failed = true;
        }
    };
    std::vector<std::thread> threads;
    for (int k = 1; k < std::max(1, n_threads) && (size_t) k < jobs.size(); ++k) threads.emplace_back(work);
    work();
    for (std::thread & t : threads) t.join();
    for (const Status & st : results)
        if (!st) return st;
    return Status::ok();
}

} // namespace moezip
