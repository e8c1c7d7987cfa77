// moezip-plan: the hosts to place experts on, as given on the command line.
//   --host here,24GiB                       this host (the coordinator), 24 GiB for experts
//   --host tcp://10.0.0.2:5601,16G,speed=0.7,public_key=KEY
// The second field is the memory budget for experts in bytes (suffixes K, M, G, T are powers of
// 1024, "KiB" and "KB" alike); speed is relative (a host twice as fast has 2; default: measured in
// the reports, else the mean of the measured hosts, else 1); public_key goes into its [[worker]].
#pragma once

#include "provider_map/status.h"

#include <cstdint>
#include <string>

namespace moezip_plan {

/// One host of the plan.
struct PlanHost {
    std::string endpoint;     ///< "here" = the coordinator, else the worker's endpoint
    uint64_t budget_bytes = 0;
    double speed = 0;         ///< relative; 0 = not given (from the reports)
    std::string public_key;   ///< the worker's CURVE public key, "" = none
    bool here() const { return endpoint == "here"; }
};

/// Parses "ENDPOINT,BYTES[,speed=S][,public_key=K]". Errors (invalid_argument) name the spec and
/// the part that is wrong: a bad endpoint (as the config checks it), a budget that is not a size,
/// a speed that is not a positive number, an unknown key.
moezip::Status plan_host_parse(const std::string & spec, PlanHost & out);

/// Parses a byte size: digits with an optional fraction and suffix K, M, G, T (x1024^n; an "i" and
/// a "B" after it are allowed, "B" alone too). Errors: invalid_argument naming the text.
moezip::Status plan_bytes_parse(const std::string & text, uint64_t & out);

/// "1.5 GiB" style text of a byte count, for messages.
std::string plan_bytes_format(uint64_t bytes);

} // namespace moezip_plan
