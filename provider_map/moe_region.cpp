#include "provider_map/moe_region.h"

#include "ggml-impl.h" // ggml_get_op_params_i32 (inline)

#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace moezip {

bool moe_node_name_parse(const char * name, std::string & what, int & il) {
    static const char prefix[] = "ffn_moe_";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0) return false;
    const char * dash = strrchr(name, '-');
    if (dash == nullptr || dash[1] == 0) return false;
    char * end = nullptr;
    long v = strtol(dash + 1, &end, 10);
    if (*end != 0 || v < 0) return false;  // "ffn_moe_x-3 (view)" and the like are not region names
    what.assign(name + sizeof prefix - 1, dash);
    il = (int) v;
    return true;
}

namespace {

// Named nodes of one layer: what -> (node index, tensor).
struct LayerNodes {
    std::map<std::string, std::pair<int, ggml_tensor *>> named;
    ggml_tensor * get(const char * what) const {
        auto it = named.find(what);
        return it == named.end() ? nullptr : it->second.second;
    }
};

bool is_glu_supported(ggml_glu_op op) {
    return op == GGML_GLU_OP_SWIGLU || op == GGML_GLU_OP_GEGLU || op == GGML_GLU_OP_REGLU ||
           op == GGML_GLU_OP_GEGLU_ERF || op == GGML_GLU_OP_GEGLU_QUICK || op == GGML_GLU_OP_SWIGLU_OAI;
}

const char * glu_name(ggml_glu_op op) {
    switch (op) {
        case GGML_GLU_OP_SWIGLU: return "swiglu";
        case GGML_GLU_OP_GEGLU: return "geglu";
        case GGML_GLU_OP_REGLU: return "reglu";
        case GGML_GLU_OP_GEGLU_ERF: return "geglu_erf";
        case GGML_GLU_OP_GEGLU_QUICK: return "geglu_quick";
        case GGML_GLU_OP_SWIGLU_OAI: return "swiglu_oai";
        default: return "other";
    }
}

bool is_mul_mat_id(const ggml_tensor * t, const ggml_tensor * src1, const ggml_tensor * ids) {
    return t != nullptr && t->op == GGML_OP_MUL_MAT_ID && t->src[1] == src1 && t->src[2] == ids;
}

// The view of slot s of weighted: [n_embd, n_tokens], row stride weighted->nb[2], offset s*nb[1].
bool is_slot_view(const ggml_tensor * v, const ggml_tensor * weighted, int64_t s) {
    if (v == nullptr || v->op != GGML_OP_VIEW || v->src[0] != weighted) return false;
    size_t offs = 0;
    memcpy(&offs, v->op_params, sizeof offs);  // ggml_view_impl stores the byte offset in op_params
    return offs == (size_t) s * weighted->nb[1] && v->ne[0] == weighted->ne[0] &&
           v->ne[1] == weighted->ne[2] && v->nb[1] == weighted->nb[2];
}

// The slot index of v if it is a view of one slot of weighted ([n_embd, n_tokens], row stride
// weighted->nb[2], offset s*nb[1]), else -1.
int64_t slot_view_index(const ggml_tensor * v, const ggml_tensor * weighted) {
    if (v == nullptr || v->op != GGML_OP_VIEW || v->src[0] != weighted || weighted->nb[1] == 0) return -1;
    size_t offs = 0;
    memcpy(&offs, v->op_params, sizeof offs);  // ggml_view_impl stores the byte offset in op_params
    if (offs % weighted->nb[1] != 0) return -1;
    const int64_t s = (int64_t) (offs / weighted->nb[1]);
    return is_slot_view(v, weighted, s) && s < weighted->ne[1] ? s : -1;
}

// Walks out -> adds -> views and fills the slot views and add nodes. The chain must be
// ADD(...ADD(view 0, view 1)..., view m-1) in slot order (CONT(view 0) when m = 1) with
// 1 <= m <= n_used_ids; n_sum = m.
bool collect_sum(ggml_tensor * out, ggml_tensor * weighted, int64_t n_used_ids,
                 std::vector<ggml_tensor *> & members, int64_t & n_sum, std::string & why) {
    if (out->op == GGML_OP_CONT) {
        if (slot_view_index(out->src[0], weighted) != 0) {
            why = "ffn_moe_out is CONT of " + std::string(out->src[0] ? out->src[0]->name : "nothing") + ", not of the view of slot 0";
            return false;
        }
        members.push_back(out);
        members.push_back(out->src[0]);
        n_sum = 1;
        return true;
    }
    std::vector<int64_t> slots;  // slot of each ADD's second operand, from the last ADD down
    ggml_tensor * cur = out;
    while (cur != nullptr && cur->op == GGML_OP_ADD && (int64_t) slots.size() < n_used_ids) {
        const int64_t s = slot_view_index(cur->src[1], weighted);
        if (s < 0) {
            why = "slot sum: ADD node '" + std::string(cur->name) + "' adds '" + (cur->src[1] ? cur->src[1]->name : "nothing") +
                  "', not a view of one slot of ffn_moe_weighted";
            return false;
        }
        slots.push_back(s);
        members.push_back(cur);
        members.push_back(cur->src[1]);
        cur = cur->src[0];
    }
    if (slot_view_index(cur, weighted) != 0) {
        why = "slot sum does not start at the view of slot 0 (found '" + std::string(cur ? cur->name : "nothing") + "', op " +
              (cur ? std::to_string((int) cur->op) : std::string("-")) + ")";
        return false;
    }
    members.push_back(cur);
    n_sum = (int64_t) slots.size() + 1;
    for (size_t i = 0; i < slots.size(); ++i)
        if (slots[i] != n_sum - 1 - (int64_t) i) {
            why = "slot sum adds slot " + std::to_string(slots[i]) + " where slot " + std::to_string(n_sum - 1 - (int64_t) i) +
                  " was expected (not in slot order)";
            return false;
        }
    if (n_sum > n_used_ids) {
        why = "slot sum has " + std::to_string(n_sum) + " terms, more than the " + std::to_string(n_used_ids) + " routed slots";
        return false;
    }
    return true;
}

// A precision or hint the engine set on an expert matmul (newer ggml's ggml_prec_set_acc/_src, e.g.
// llama.cpp's mistral4 experts; ggml_mul_mat_set_hint) lives in its op_params. moezip computes with a
// plain ggml_mul_mat_id, whose op_params are all zero (abi_probe.cpp checks that), so such a node
// could run other kernels than moezip's: the region is left to the engine.
bool has_op_params(const ggml_tensor * t) {
    for (int32_t p : t->op_params)
        if (p != 0) return true;
    return false;
}

// A weight the executor can compute with the engine's own kernels: in host memory, either in GGUF
// layout or in a CPU "extra" buffer type whose tensor traits (tensor->extra) the CPU backend
// dispatches to (CPU_REPACK: interleaved q4_0/q4_K/iq4_nl layouts, ggml/src/ggml-cpu/repack.cpp).
bool weight_ok(const ggml_tensor * w, const BufferTypeNameFn & buft_name, bool & repacked, std::string & why) {
    if (w->data == nullptr) {
        why = std::string(w->name) + " has no data in host memory";
        return false;
    }
    const std::string buft = buft_name ? buft_name(w) : std::string();
    repacked = w->extra != nullptr || buft.find("REPACK") != std::string::npos;
    if (repacked && (w->extra == nullptr || w->buffer == nullptr)) {
        why = std::string(w->name) + " is in buffer type " + (buft.empty() ? "?" : buft) + " without the kernel traits that compute it";
        return false;
    }
    return true;
}

// Dense f32 layout (this file calls no ggml function: the preload binds ggml only at run time).
bool is_dense_f32(const ggml_tensor * t) {
    return t->type == GGML_TYPE_F32 && t->nb[0] == sizeof(float) && t->nb[1] == t->nb[0] * t->ne[0] &&
           t->nb[2] == t->nb[1] * t->ne[1] && t->nb[3] == t->nb[2] * t->ne[2];
}

// `mm` (a MUL_MAT_ID over `input` and `ids`), or ADD_ID(mm, bias, ids) when the layer has the
// node `biased_name` (gpt-oss: ggml_add_id in build_moe_ffn). Sets *bias. "" or why not.
std::string expert_matmul(const LayerNodes & ln, ggml_tensor * mm, const char * biased_name, const ggml_tensor * input,
                          const ggml_tensor * ids, int64_t n_out, ggml_tensor ** out, ggml_tensor ** bias) {
    if (!is_mul_mat_id(mm, input, ids))
        return std::string(mm->name) + " is not MUL_MAT_ID over the region's input and ids (op " + std::to_string((int) mm->op) + ")";
    *out = mm;
    *bias = nullptr;
    ggml_tensor * biased = ln.get(biased_name);
    if (biased == nullptr) return "";
    ggml_tensor * b = biased->src[1];
    if (biased->op != GGML_OP_ADD_ID || biased->src[0] != mm || biased->src[2] != ids || b == nullptr)
        return std::string(biased->name) + " is not ADD_ID(" + mm->name + ", bias, ids)";
    if (b->type != GGML_TYPE_F32 || b->ne[0] != n_out || b->ne[2] != 1 || b->nb[0] != sizeof(float) || b->data == nullptr)
        return std::string("bias ") + b->name + " is not f32 [" + std::to_string(n_out) + ", n_expert] in host memory";
    *out = biased;
    *bias = b;
    return "";
}

// The layer's named nodes, for reasons: "ffn_moe_up, ffn_moe_gate, ...".
std::string found_nodes(const LayerNodes & ln) {
    std::string s;
    for (const auto & kv : ln.named) s += (s.empty() ? "ffn_moe_" : ", ffn_moe_") + kv.first;
    return s;
}

// Which nodes the layer lacks for the form it has: the whole region (ffn_moe_out present) needs
// ffn_moe_weighted too; the split form (no ffn_moe_out: the sum is in another backend's graph)
// needs only the expert FFN. "" when complete.
std::string missing_nodes(const LayerNodes & ln) {
    std::string missing;
    std::vector<const char *> need = {"up", "gate", "down"};
    if (ln.get("out")) need.push_back("weighted");
    for (const char * v : need)
        if (!ln.get(v)) missing += std::string(missing.empty() ? "" : ", ") + "ffn_moe_" + v;
    return missing;
}

// Matches one layer's nodes against the pattern; fills r (members: every region node).
bool match_layer(const LayerNodes & ln, MoeRegion & r, std::vector<ggml_tensor *> & members,
                 const BufferTypeNameFn & buft_name) {
    std::string & why = r.reason;
    if (ln.get("gate_up")) { why = "fused gate_up experts (ffn_moe_gate_up, one MUL_MAT_ID for both) are not supported"; return false; }
    for (const char * v : {"up_scaled", "gate_scaled", "down_scaled", "swiglu_limited", "situ", "gate_up_biased"})
        if (ln.get(v)) { why = std::string("activation/scale variant ffn_moe_") + v + " is not supported"; return false; }
    ggml_tensor * out = ln.get("out");
    ggml_tensor * weighted = ln.get("weighted");
    ggml_tensor * down = ln.get("down");
    ggml_tensor * gate = ln.get("gate");
    ggml_tensor * up = ln.get("up");
    const std::string missing = missing_nodes(ln);
    if (!missing.empty()) {
        why = "incomplete pattern: no node " + missing + " in this layer (found " + found_nodes(ln) + ")";
        return false;
    }
    // No ffn_moe_out: a scheduler split that holds the expert FFN and leaves the slot sum (and maybe
    // the weighting) to another backend (moe_region.h, "The split form").
    r.slot_out = out == nullptr;
    ggml_tensor * ids = down->src[2];
    if (down->op != GGML_OP_MUL_MAT_ID || ids == nullptr || ids->type != GGML_TYPE_I32) { why = "ffn_moe_down is not MUL_MAT_ID with i32 ids"; return false; }
    r.n_used_ids = ids->ne[0];
    r.n_tokens = ids->ne[1];
    // The routing weights multiply either the experts' output (ffn_moe_weighted = MUL(down, weights))
    // or, in llama4, their input (ffn_moe_weighted = MUL(REPEAT(input), weights), build_moe_ffn's
    // weight_before_ffn).
    ggml_tensor * hidden = nullptr, * ffn_in = nullptr, * repeat = nullptr;
    if (weighted != nullptr && weighted->op == GGML_OP_MUL && weighted->src[0] != nullptr && weighted->src[0]->op == GGML_OP_REPEAT) {
        r.weight_before = true;
        repeat = weighted->src[0];
        hidden = repeat->src[0];
        ffn_in = weighted;
        if (hidden == nullptr || repeat->ne[1] != r.n_used_ids || repeat->ne[2] != r.n_tokens || repeat->ne[3] != 1) {
            why = "ffn_moe_weighted is MUL(REPEAT(x), weights) but the repeat is not [n_embd, n_used, n_tokens]";
            return false;
        }
    } else {
        hidden = gate->src[1];
        ffn_in = hidden;
    }
    if (hidden == nullptr) { why = "no input to the expert FFN"; return false; }
    if (r.slot_out && !r.weight_before && hidden->ne[1] != 1) {
        // llama4's weighted input computed in another backend's graph: one input row per slot
        why = std::string("split form: the experts' input ") + hidden->name + " has " + std::to_string(hidden->ne[1]) +
              " rows per token (weighted per slot elsewhere, as llama4's weight-before-FFN), not one; found " + found_nodes(ln);
        return false;
    }
    r.n_embd = hidden->ne[0];
    r.n_ff = gate->ne[0];
    ggml_tensor * gate_out = nullptr, * up_out = nullptr, * down_out = nullptr;
    for (std::string w : {expert_matmul(ln, up, "up_biased", ffn_in, ids, r.n_ff, &up_out, &r.up_b),
                          expert_matmul(ln, gate, "gate_biased", ffn_in, ids, r.n_ff, &gate_out, &r.gate_b)})
        if (!w.empty()) { why = w; return false; }
    ggml_tensor * act = down->src[1];
    if (act == nullptr || act->op != GGML_OP_GLU || act->src[0] != gate_out || act->src[1] != up_out) {
        why = std::string("the activation ") + (act ? act->name : "?") + " is not GLU(" + gate_out->name + ", " + up_out->name + ")";
        return false;
    }
    r.glu_op = (ggml_glu_op) ggml_get_op_params_i32(act, 0);  // ggml_glu_impl, ggml/src/ggml.c
    if (!is_glu_supported(r.glu_op) || ggml_get_op_params_i32(act, 1) != 0) {
        why = std::string("the activation ") + act->name + " is GLU op " + std::to_string((int) r.glu_op) +
              (ggml_get_op_params_i32(act, 1) ? " (swapped)" : "") + ", not one moezip computes";
        return false;
    }
    if (r.glu_op == GGML_GLU_OP_SWIGLU_OAI) {  // ggml_swiglu_oai: alpha and limit in op_params[2], [3]
        r.glu_alpha = ggml_get_op_params_f32(act, 2);
        r.glu_limit = ggml_get_op_params_f32(act, 3);
    }
    std::string w = expert_matmul(ln, down, "down_biased", act, ids, r.n_embd, &down_out, &r.down_b);
    if (!w.empty()) { why = w; return false; }
    ggml_tensor * summed = down_out;  // what the slot views read (the split form: its output)
    if (!r.weight_before && weighted != nullptr) {
        if (weighted->op != GGML_OP_MUL || weighted->src[0] != down_out) {
            why = std::string("ffn_moe_weighted is not MUL(") + down_out->name + ", weights)";
            return false;
        }
        summed = weighted;
    }
    for (const ggml_tensor * m : {up, gate, down})
        if (has_op_params(m)) {
            why = std::string(m->name) + " carries op params (a precision or hint set by the engine) that moezip's "
                  "ggml_mul_mat_id would not";
            return false;
        }
    ggml_tensor * weights = weighted != nullptr ? weighted->src[1] : nullptr;
    r.hidden = hidden; r.ids = ids; r.weights = weights; r.out = r.slot_out ? summed : out;
    r.gate_exps = gate->src[0]; r.up_exps = up->src[0]; r.down_exps = down->src[0];
    r.n_expert = r.gate_exps->ne[2];
    if (hidden->type != GGML_TYPE_F32 || hidden->ne[1] != 1 || hidden->ne[2] != r.n_tokens) { why = "input is not f32 [n_embd, 1, n_tokens]"; return false; }
    if (weights != nullptr && (weights->type != GGML_TYPE_F32 || weights->ne[0] != 1 || weights->ne[1] != r.n_used_ids || weights->ne[2] != r.n_tokens)) {
        why = "routing weights are not f32 [1, n_used, n_tokens]";
        return false;
    }
    if (!r.slot_out && (!is_dense_f32(out) || out->ne[0] != r.n_embd || out->ne[1] != r.n_tokens)) {
        why = "ffn_moe_out is not contiguous f32 [n_embd, n_tokens]";
        return false;
    }
    if (r.slot_out && (!is_dense_f32(r.out) || r.out->ne[0] != r.n_embd || r.out->ne[1] != r.n_used_ids || r.out->ne[2] != r.n_tokens)) {
        why = std::string("split form: the output ") + r.out->name + " is not contiguous f32 [n_embd, n_used, n_tokens]";
        return false;
    }
    if (r.down_exps->ne[0] != r.n_ff || r.down_exps->ne[1] != r.n_embd || r.up_exps->ne[1] != r.n_ff) { why = "expert weight shapes disagree"; return false; }
    for (const ggml_tensor * b : {r.gate_b, r.up_b, r.down_b})
        if (b != nullptr && b->ne[1] != r.n_expert) { why = std::string("bias ") + b->name + " does not have n_expert columns"; return false; }
    bool repacked[3] = {false, false, false};
    ggml_tensor * const exps[3] = {r.gate_exps, r.up_exps, r.down_exps};
    for (int i = 0; i < 3; ++i)
        if (!weight_ok(exps[i], buft_name, repacked[i], why)) return false;
    r.repacked = repacked[0] || repacked[1] || repacked[2];
    r.up = up_out; r.gate = gate_out; r.act = act; r.down = down_out; r.weighted = summed;
    members = {up, gate, act, down};
    if (weighted != nullptr) members.push_back(weighted);
    for (ggml_tensor * t : {up_out, gate_out, down_out, repeat})
        if (t != nullptr && t != up && t != gate && t != down) members.push_back(t);
    if (r.slot_out) {
        r.n_used = r.n_used_ids;  // every routed slot: the sum that picks from them is not in this graph
    } else if (!collect_sum(out, summed, r.n_used_ids, members, r.n_used, why)) {
        return false;
    }
    std::string p = r.weight_before ? "weight_in," : "";
    p += std::string("up") + (r.up_b ? ",up_bias" : "") + ",gate" + (r.gate_b ? ",gate_bias" : "") + "," + glu_name(r.glu_op) +
         ",down" + (r.down_b ? ",down_bias" : "") + (r.weight_before || weighted == nullptr ? "" : ",weighted") +
         (r.slot_out ? ",slots" : ",sum") + std::to_string(r.n_used);
    if (r.n_used != r.n_used_ids) p += "of" + std::to_string(r.n_used_ids);
    r.pattern = p;
    return true;
}

} // namespace

std::vector<MoeRegion> moe_regions_find(ggml_tensor * const * nodes, int n_nodes, const BufferTypeNameFn & buft_name) {
    std::map<int, LayerNodes> layers;
    std::string what;
    int il = 0;
    for (int i = 0; i < n_nodes; ++i) {
        if (moe_node_name_parse(nodes[i]->name, what, il)) layers[il].named[what] = {i, nodes[i]};
    }
    std::vector<MoeRegion> regions;
    std::unordered_map<const ggml_tensor *, int> index_of;
    for (int i = 0; i < n_nodes; ++i) index_of[nodes[i]] = i;
    // intermediate tensor -> region number, to find readers outside the region
    std::unordered_map<const ggml_tensor *, size_t> inner;
    for (auto & kv : layers) {
        const LayerNodes & ln = kv.second;
        // a layer with only router nodes (no expert matmuls) is not a region
        if (!ln.get("up") && !ln.get("gate") && !ln.get("gate_up") && !ln.get("down")) continue;
        MoeRegion r;
        r.il = kv.first;
        std::vector<ggml_tensor *> members;
        r.dispatchable = match_layer(ln, r, members, buft_name);
        if (r.dispatchable) {
            r.first_node = n_nodes;
            std::unordered_set<const ggml_tensor *> member_set(members.begin(), members.end());
            for (ggml_tensor * m : members) {
                auto it = index_of.find(m);
                if (it == index_of.end()) { r.dispatchable = false; r.reason = std::string("region node ") + m->name + " is not in the graph"; break; }
                if (it->second < r.first_node) r.first_node = it->second;
                if (m == r.out) r.last_node = it->second;
            }
            for (int i = r.first_node; r.dispatchable && i <= r.last_node; ++i) {
                if (!member_set.count(nodes[i])) {
                    r.dispatchable = false;
                    r.reason = std::string("foreign node '") + nodes[i]->name + "' inside the region";
                }
            }
            if (r.dispatchable) {
                for (ggml_tensor * m : members) if (m != r.out) inner[m] = regions.size();
            }
        }
        if (!r.dispatchable) r.pattern = "unrecognised";
        regions.push_back(r);
    }
    // Nothing outside a region may read its intermediates: we do not produce them.
    for (int i = 0; i < n_nodes && !inner.empty(); ++i) {
        for (int s = 0; s < GGML_MAX_SRC; ++s) {
            auto it = inner.find(nodes[i]->src[s]);
            if (it == inner.end()) continue;
            MoeRegion & r = regions[it->second];
            if (i >= r.first_node && i <= r.last_node) continue;
            if (r.dispatchable) {
                r.dispatchable = false;
                r.reason = std::string("node '") + nodes[i]->name + "' outside the region reads its intermediate";
            }
        }
    }
    return regions;
}

} // namespace moezip
