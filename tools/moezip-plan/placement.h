// moezip-plan: which host owns which experts.
//
// 1. Every expert gets one owner, hottest first, on the host where it raises the expected time the
//    least: the sum over MoE layers of the busiest host's load in that layer divided by its speed
//    (every layer waits for its slowest host; an expert id is owned in every layer at once). Hosts
//    hold at most budget / expert_bytes experts.
// 2. Memory left over holds replicas, hottest experts first, each time on the host with the most
//    room left that does not hold it yet, until no host has room: a second owner for as many
//    experts as fit, then a third, ... The coordinator then balances each call's slots between the
//    owners (experts.replicas, coordinator/balance/expert_balance.h).
#pragma once

#include "tools/moezip-plan/plan_hosts.h"

#include "provider_map/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moezip_plan {

/// The plan: owners of every expert and what each host holds.
struct Placement {
    std::vector<std::vector<int>> owners;      ///< [expert] host indices, the first-phase owner first
    std::vector<std::vector<int>> experts_of;  ///< [host] expert ids, ascending
    std::vector<double> share;                 ///< [host] expected share of the load with single owners
    std::vector<int> capacity;                 ///< [host] experts its budget holds
    int replicated = 0;                        ///< experts with more than one owner
};

/// Places n_expert experts (load [layer][expert], from plan_input_load) on `hosts` with `speeds`
/// (relative, > 0, one per host). Errors (invalid_argument): the budgets together hold fewer than
/// n_expert experts ("budgets too small: ..." naming each host's budget, the expert size and the
/// bytes missing); expert_bytes 0 (unknown size).
moezip::Status plan_place(const std::vector<std::vector<double>> & load, int n_expert, uint64_t expert_bytes,
                          const std::vector<PlanHost> & hosts, const std::vector<double> & speeds, Placement & out);

} // namespace moezip_plan
