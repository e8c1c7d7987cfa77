#include "tools/moezip-plan/plan_hosts.h"

#include "coordinator/config/config_endpoint.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace moezip_plan {

moezip::Status plan_bytes_parse(const std::string & text, uint64_t & out) {
    const char * s = text.c_str();
    char * end = nullptr;
    const double v = strtod(s, &end);
    if (end == s || !(v >= 0) || !std::isfinite(v) || *s == '-' || *s == '+' || *s == ' ')
        return moezip::Status::invalid_argument("\"" + text + "\" is not a size (e.g. 24GiB, 1.5G, 800M, 4096)");
    std::string suffix(end);
    double mult = 1;
    const std::string units = "KMGT";
    if (!suffix.empty() && units.find(suffix[0]) != std::string::npos) {
        mult = std::pow(1024.0, (double) (units.find(suffix[0]) + 1));
        suffix.erase(0, 1);
        if (!suffix.empty() && suffix[0] == 'i') suffix.erase(0, 1);
    }
    if (suffix == "B") suffix.clear();
    if (!suffix.empty())
        return moezip::Status::invalid_argument("\"" + text + "\" is not a size (suffixes: K, M, G, T, optionally with iB or B)");
    const double bytes = v * mult;
    if (bytes >= 1.8e19) return moezip::Status::invalid_argument("\"" + text + "\" is too large");
    out = (uint64_t) bytes;
    return moezip::Status::ok();
}

std::string plan_bytes_format(uint64_t bytes) {
    const char * units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double) bytes;
    int u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; ++u; }
    char buf[48];
    if (u == 0) snprintf(buf, sizeof buf, "%llu B", (unsigned long long) bytes);
    else snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
    return buf;
}

moezip::Status plan_host_parse(const std::string & spec, PlanHost & out) {
    out = PlanHost();
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        const size_t comma = spec.find(',', start);
        parts.push_back(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    const std::string who = "--host \"" + spec + "\": ";
    if (parts.size() < 2) return moezip::Status::invalid_argument(who + "expected ENDPOINT,BUDGET[,speed=S][,public_key=K]");
    out.endpoint = parts[0];
    std::string why;
    if (!out.here() && !moezip::config_endpoint_valid(out.endpoint, false, why))
        return moezip::Status::invalid_argument(who + "endpoint: expected \"here\", \"tcp://host:port\" or \"ipc:///path\" (" + why + ")");
    moezip::Status st = plan_bytes_parse(parts[1], out.budget_bytes);
    if (!st) return moezip::Status::invalid_argument(who + "budget: " + st.message());
    for (size_t i = 2; i < parts.size(); ++i) {
        const size_t eq = parts[i].find('=');
        const std::string key = parts[i].substr(0, eq), value = eq == std::string::npos ? "" : parts[i].substr(eq + 1);
        if (key == "speed") {
            char * end = nullptr;
            out.speed = strtod(value.c_str(), &end);
            if (value.empty() || *end != 0 || !(out.speed > 0) || !std::isfinite(out.speed))
                return moezip::Status::invalid_argument(who + "speed: expected a positive number, got \"" + value + "\"");
        } else if (key == "public_key") {
            if (out.here()) return moezip::Status::invalid_argument(who + "public_key: only a worker has one");
            if (value.size() != 40) return moezip::Status::invalid_argument(who + "public_key: expected 40 Z85 characters, got " +
                                                                            std::to_string(value.size()));
            out.public_key = value;
        } else {
            return moezip::Status::invalid_argument(who + "unknown \"" + key + "\" (known: speed=S, public_key=K)");
        }
    }
    return moezip::Status::ok();
}

} // namespace moezip_plan
