// moezip: cross-field checks of the config (shares, expert ownership, duplicate endpoints) and the expert
// coverage check that needs the model's n_expert.
#include "coordinator/config/config_internal.h"

#include <algorithm>
#include <cmath>

namespace moezip {

namespace {

constexpr double share_tolerance = 1e-6;

std::string worker_name(size_t i) { return "worker[" + std::to_string(i) + "]"; }

// An owner of experts in experts mode: the coordinator (experts.local) or a worker.
struct ExpertOwner {
    std::string key;   // "experts.local" or "worker[1].experts"
    std::string who;   // "the coordinator" or "worker[1]"
    int line;
    const std::vector<ExpertRange> * experts;
};

std::vector<ExpertOwner> expert_owners(const Config & cfg) {
    int mode_line = config_line_of(cfg, "mode", 1);
    std::vector<ExpertOwner> owners;
    owners.push_back({"experts.local", "the coordinator", config_line_of(cfg, "experts.local", mode_line),
                      &cfg.experts.local});
    for (size_t i = 0; i < cfg.workers.size(); ++i) {
        std::string key = worker_name(i) + ".experts";
        owners.push_back({key, worker_name(i), config_line_of(cfg, key, cfg.workers[i].line), &cfg.workers[i].experts});
    }
    return owners;
}

// rows and shard modes: local_share + every worker's share must be 1. `mode` names the section
// ("rows" or "shard") and what is shared ("rows" or "n_ff slices") in messages.
void check_shares(const Config & cfg, const char * mode, double local_share, bool auto_share, std::vector<ConfigIssue> & issues) {
    const std::string key = std::string(mode) + ".local_share";
    int local_line = config_line_of(cfg, key, config_line_of(cfg, "mode", 1));
    // automatic shares are all measured: a worker's share is "auto" or left out, never a number
    for (size_t i = 0; i < cfg.workers.size(); ++i) {
        const WorkerConfig & w = cfg.workers[i];
        const std::string wkey = worker_name(i) + ".share";
        if (auto_share && w.has_share && !w.share_auto)
            issues.push_back({config_line_of(cfg, wkey, w.line), wkey + ": " + key + " = \"auto\" measures every share: write \"auto\" "
                                                                 "or leave it out, got " + config_format_double(w.share)});
        if (!auto_share && w.share_auto)
            issues.push_back({config_line_of(cfg, wkey, w.line), wkey + ": \"auto\" needs " + key + " = \"auto\" too"});
    }
    if (auto_share) return;
    if (cfg.workers.empty()) {
        if (local_share != 1.0) {
            issues.push_back({local_line, key + ": " + mode + " mode without any [[worker]] needs local_share = 1, got " +
                                          config_format_double(local_share)});
        }
        return;
    }
    double sum = local_share;
    std::string terms = config_format_double(local_share);
    bool all_set = true;
    for (size_t i = 0; i < cfg.workers.size(); ++i) {
        const WorkerConfig & w = cfg.workers[i];
        if (!w.has_share) issues.push_back({w.line, worker_name(i) + ".share: required in " + mode + " mode"});
        all_set = all_set && w.has_share;
        sum += w.share;
        terms += " + " + config_format_double(w.share);
    }
    if (all_set && std::fabs(sum - 1.0) > share_tolerance) {
        std::string note = cfg.lines.count(key) ? "" : " (" + key + " is not set and defaults to 1)";
        issues.push_back({local_line, key + ": local_share + the workers' shares must be 1 (+-1e-6), got " +
                                      terms + " = " + config_format_double(sum) + note});
    }
}

void check_experts(const Config & cfg, std::vector<ConfigIssue> & issues) {
    std::vector<ExpertOwner> owners = expert_owners(cfg);
    for (size_t i = 1; i < owners.size(); ++i) {
        if (owners[i].experts->empty()) {
            issues.push_back({owners[i].line, owners[i].key + ": required in experts mode (the experts this worker owns)"});
        }
    }
    for (size_t j = 1; j < owners.size() && !cfg.experts.replicas; ++j) {
        for (size_t i = 0; i < j; ++i) {
            int e = expert_ranges_first_common(*owners[i].experts, *owners[j].experts);
            if (e < 0) continue;
            issues.push_back({owners[j].line, owners[j].key + ": expert " + std::to_string(e) + " is owned by both " +
                                              owners[i].who + " (" + owners[i].key + ", line " +
                                              std::to_string(owners[i].line) + ") and " + owners[j].who +
                                              " (set experts.replicas = true to hold it on both)"});
        }
    }
    // with partial sums the order of additions, so the bits, would depend on which owner computed a slot
    if (cfg.experts.replicas && cfg.experts.combine != ExpertCombine::exact) {
        issues.push_back({config_line_of(cfg, "experts.replicas"),
                          "experts.replicas: needs combine = \"exact\" (with \"partial\" the result would depend on which "
                          "owner computed a slot), got combine = \"partial\""});
    }
    if (cfg.experts.shadow_every > 0 && cfg.experts.combine != ExpertCombine::partial) {
        issues.push_back({config_line_of(cfg, "experts.shadow_every"),
                          "experts.shadow_every: only used with combine = \"partial\", got combine = \"exact\""});
    }
}

void check_endpoints(const Config & cfg, std::vector<ConfigIssue> & issues) {
    for (size_t j = 0; j < cfg.workers.size(); ++j) {
        for (size_t i = 0; i < j; ++i) {
            if (cfg.workers[j].endpoint.empty() || cfg.workers[i].endpoint != cfg.workers[j].endpoint) continue;
            std::string key = worker_name(j) + ".endpoint";
            issues.push_back({config_line_of(cfg, key, cfg.workers[j].line),
                              key + ": duplicate endpoint " + config_quote(cfg.workers[j].endpoint) +
                              ", already used by " + worker_name(i) + " (line " +
                              std::to_string(config_line_of(cfg, worker_name(i) + ".endpoint")) + ")"});
            break;
        }
    }
}

// CURVE keys come in pairs: a worker's public key needs this host's key file, and the other way round;
// a worker with a key needs an allow-list of coordinators (else every client key would do).
void check_security(const Config & cfg, std::vector<ConfigIssue> & issues) {
    for (size_t i = 0; i < cfg.workers.size(); ++i) {
        const WorkerConfig & w = cfg.workers[i];
        const std::string p = worker_name(i);
        if (!w.public_key.empty() && w.client_key.empty())
            issues.push_back({config_line_of(cfg, p + ".public_key", w.line),
                              p + ".public_key: needs client_key (this host's key file, moezip-worker --keygen) in this [[worker]] or in [dispatch]"});
        if (w.has_client_key && w.public_key.empty())
            issues.push_back({config_line_of(cfg, p + ".client_key", w.line),
                              p + ".client_key: needs public_key (the worker's CURVE public key, from its moezip.pub)"});
    }
    const WorkerServerConfig & ws = cfg.worker_server;
    if (!ws.key.empty() && ws.allow.empty())
        issues.push_back({config_line_of(cfg, "worker_server.key"),
                          "worker_server.allow: required with worker_server.key (the coordinators' public keys; without it every client key would be accepted)"});
    if (ws.key.empty() && !ws.allow.empty())
        issues.push_back({config_line_of(cfg, "worker_server.allow"), "worker_server.allow: needs worker_server.key (this worker's key file)"});
}

} // namespace

void config_check_cross(const Config & cfg, std::vector<ConfigIssue> & issues) {
    // results of other kernels are only as trusted as they are checked
    if (cfg.numerics == NumericsPolicy::approximate && cfg.dispatch.verify_every == 0)
        issues.push_back({config_line_of(cfg, "numerics"), "numerics: \"approximate\" needs dispatch.verify_every (1..1000000000): "
                                                           "results of another CPU variant are accepted only as far as they are checked"});
    check_endpoints(cfg, issues);
    check_security(cfg, issues);
    if (cfg.mode == ConfigMode::rows) check_shares(cfg, "rows", cfg.rows.local_share, cfg.rows.auto_share, issues);
    if (cfg.mode == ConfigMode::shard) check_shares(cfg, "shard", cfg.shard.local_share, cfg.shard.auto_share, issues);
    if (cfg.mode == ConfigMode::experts) check_experts(cfg, issues);
    // the copy is made by the handlers that compute experts here from the mapping (experts, local); set
    // in another mode it would promise huge pages that nothing makes
    if (cfg.lines.count("experts.copy_local") && cfg.mode != ConfigMode::experts && cfg.mode != ConfigMode::local)
        issues.push_back({config_line_of(cfg, "experts.copy_local"),
                          std::string("experts.copy_local: only used in modes \"experts\" and \"local\", got mode = \"") +
                          config_mode_name(cfg.mode) + "\""});
}

Status config_check_expert_coverage(const Config & cfg, int n_expert) {
    if (cfg.mode != ConfigMode::experts) return Status::ok();
    if (n_expert <= 0 || n_expert > expert_id_max + 1) {
        return Status::invalid_argument(cfg.source + ": model n_expert " + std::to_string(n_expert) + " out of range");
    }
    std::vector<ExpertOwner> owners = expert_owners(cfg);
    for (const ExpertOwner & o : owners) {
        for (const ExpertRange & r : *o.experts) {
            if (r.last < n_expert) continue;
            return Status::invalid_argument(cfg.source + ":" + std::to_string(o.line) + ": " + o.key + ": expert " +
                                            std::to_string(std::max(r.first, n_expert)) + " does not exist (the model has " +
                                            std::to_string(n_expert) + " experts, 0.." + std::to_string(n_expert - 1) + ")");
        }
    }
    for (int e = 0; e < n_expert; ++e) {
        bool owned = false;
        for (const ExpertOwner & o : owners) owned = owned || expert_ranges_contains(*o.experts, e);
        if (owned) continue;
        std::string held;
        for (const ExpertOwner & o : owners) {
            held += "; " + o.who + ": " + (o.experts->empty() ? "none" : expert_ranges_format(*o.experts));
        }
        return Status::invalid_argument(cfg.source + ":" + std::to_string(owners[0].line) + ": experts.local: expert " +
                                        std::to_string(e) + " has no owner (the model has " + std::to_string(n_expert) +
                                        " experts" + held + ")");
    }
    return Status::ok();
}

int config_line_of(const Config & cfg, const std::string & key, int fallback) {
    auto it = cfg.lines.find(key);
    return it == cfg.lines.end() ? fallback : it->second;
}

std::string config_issues_join(const std::string & file, std::vector<ConfigIssue> issues) {
    std::stable_sort(issues.begin(), issues.end(),
                     [](const ConfigIssue & a, const ConfigIssue & b) { return a.line < b.line; });
    std::string out;
    for (const ConfigIssue & is : issues) {
        if (!out.empty()) out += "\n";
        out += file + ":" + std::to_string(is.line) + ": " + is.text;
    }
    return out;
}

} // namespace moezip
