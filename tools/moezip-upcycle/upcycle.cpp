#include "tools/moezip-upcycle/upcycle.h"

#include "tools/moezip-upcycle/dense_gguf.h"
#include "tools/moezip-upcycle/gguf_stream_writer.h"

#include "gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <sys/stat.h>

using moezip::Status;

namespace moezip_upcycle {

namespace {

// llama.cpp accepts at most this many experts (src/llama-hparams.h, LLAMA_MAX_EXPERTS).
constexpr int64_t max_experts = 1024;

enum class source_kind { copy, gate_inp, gate_exps, up_exps, down_exps };

// One tensor of the output file and where its bytes come from.
struct out_tensor {
    std::string name;
    ggml_type type = GGML_TYPE_F32;
    int64_t ne[4] = {1, 1, 1, 1};
    source_kind kind = source_kind::copy;
    int64_t src_id = -1;  // input tensor id (copy)
    int64_t layer = -1;   // layer (MoE tensors)
};

struct out_shape {
    int64_t n_embd, n_ff_exp, n_expert;
};

// The expert types of layer il: --type, or each the type of the layer's own dense tensor (quantized
// models mix types per layer, e.g. Q4_K_M).
void layer_exps_types(const dense_gguf & in, int64_t il, const type_choice & c, ggml_type type[3]) {
    const dense_layer_ids & l = in.layer(il);
    const int64_t src[3] = {l.gate, l.up, l.down};
    for (int k = 0; k < 3; ++k) type[k] = type_choice_resolve(c, gguf_get_tensor_type(in.gguf(), src[k]));
}

void plan_moe_layer(std::vector<out_tensor> & plan, int64_t il, const out_shape & sh, const ggml_type type[3]) {
    const std::string blk = "blk." + std::to_string(il) + ".";
    auto add = [&](const char * name, ggml_type type, source_kind kind, int64_t ne0, int64_t ne1, int64_t ne2) {
        out_tensor t;
        t.name = blk + name;
        t.type = type;
        t.ne[0] = ne0; t.ne[1] = ne1; t.ne[2] = ne2;
        t.kind = kind;
        t.layer = il;
        plan.push_back(t);
    };
    // shapes: src/models/llama.cpp, llama_model_llama::load_arch_tensors (n_expert != 0 branch)
    add("ffn_gate_inp.weight",  GGML_TYPE_F32, source_kind::gate_inp,  sh.n_embd,   sh.n_expert, 1);
    add("ffn_gate_exps.weight", type[0],       source_kind::gate_exps, sh.n_embd,   sh.n_ff_exp, sh.n_expert);
    add("ffn_up_exps.weight",   type[1],       source_kind::up_exps,   sh.n_embd,   sh.n_ff_exp, sh.n_expert);
    add("ffn_down_exps.weight", type[2],       source_kind::down_exps, sh.n_ff_exp, sh.n_embd,  sh.n_expert);
}

// The input's tensors in order; each layer's three dense FFN tensors are replaced, where the first
// of them stood, by the router and the three expert tensors. With experts none every tensor stays,
// its type chosen by llama-quantize's rule (type_for_dense_tensor).
std::vector<out_tensor> plan_tensors(const dense_gguf & in, const out_shape & sh, const upcycle_params & p) {
    std::vector<out_tensor> plan;
    const gguf_context * g = in.gguf();
    for (int64_t id = 0; id < gguf_get_n_tensors(g); ++id) {
        const int64_t il = p.experts == expert_kind::none ? -1 : in.ffn_layer_of(id);
        if (il >= 0) {
            const dense_layer_ids & l = in.layer(il);
            ggml_type type[3];
            layer_exps_types(in, il, p.type, type);
            if (id == std::min({l.gate, l.up, l.down})) plan_moe_layer(plan, il, sh, type);
            continue;
        }
        out_tensor t;
        t.name = gguf_get_tensor_name(g, id);
        t.type = gguf_get_tensor_type(g, id);
        memcpy(t.ne, gguf_get_tensor_ne(g, id), sizeof t.ne);
        t.src_id = id;
        if (p.experts == expert_kind::none && !p.type.same) {
            const int n_dims = t.ne[3] > 1 ? 4 : t.ne[2] > 1 ? 3 : t.ne[1] > 1 ? 2 : 1;
            t.type = type_for_dense_tensor(t.name, n_dims, t.ne[0], t.type, p.type.type);
        }
        plan.push_back(t);
    }
    return plan;
}

// Every tensor whose type differs from its source's is converted here: it must be writable.
Status check_plan_types(const dense_gguf & in, const std::vector<out_tensor> & plan) {
    for (const out_tensor & t : plan) {
        const ggml_type src = t.kind == source_kind::copy ? gguf_get_tensor_type(in.gguf(), t.src_id) : GGML_TYPE_F32;
        if (t.kind == source_kind::gate_inp || (t.kind == source_kind::copy && t.type == src)) continue;
        Status s = type_check_writable(t.name, t.type, t.ne[0],
                                       "choose another --type (f32 and f16 fit any shape), or an --n-expert that makes the "
                                       "row length a multiple of the block");
        if (!s) return s;
    }
    return Status::ok();
}

void set_metadata(gguf_context * out, const gguf_context * in, const upcycle_params & p, const upcycle_summary & sum) {
    gguf_set_kv(out, in);
    // The writer pads with the output context's alignment (gguf_init_empty: GGUF_DEFAULT_ALIGNMENT);
    // a copied general.alignment with another value would describe the file wrongly.
    const int64_t align_id = gguf_find_key(out, "general.alignment");
    if (align_id >= 0 && (gguf_get_kv_type(out, align_id) != GGUF_TYPE_UINT32 ||
                          gguf_get_val_u32(out, align_id) != gguf_get_alignment(out))) {
        gguf_remove_key(out, "general.alignment");
    }
    if (p.experts == expert_kind::none) {
        gguf_set_val_str(out, "moezip.upcycle.experts", expert_kind_name(p.experts));
        return;
    }
    // llama reads n_expert, n_expert_used and n_ff (= per-expert width for MoE layers) from these
    // (src/llama-model.cpp, llama_model::load_hparams).
    gguf_set_val_u32(out, "llama.expert_count", (uint32_t) p.n_expert);
    gguf_set_val_u32(out, "llama.expert_used_count", (uint32_t) p.n_expert_used);
    gguf_set_val_u32(out, "llama.feed_forward_length", (uint32_t) sum.n_ff_exp);
    gguf_set_val_u32(out, "llama.expert_feed_forward_length", (uint32_t) sum.n_ff_exp);
    gguf_set_val_str(out, "moezip.upcycle.experts", expert_kind_name(p.experts));
    gguf_set_val_str(out, "moezip.upcycle.split", split_kind_name(p.split));
    gguf_set_val_str(out, "moezip.upcycle.router", router_kind_name(sum.router));
    gguf_set_val_f32(out, "moezip.upcycle.router_scale", sum.router == router_kind::zero ? 0.0f : p.router_scale);
    gguf_set_val_f32(out, "moezip.upcycle.down_scale", sum.down_scale);
    gguf_set_val_u32(out, "moezip.upcycle.dense_feed_forward_length", (uint32_t) sum.n_ff);
}

struct gguf_deleter { void operator()(gguf_context * c) const { gguf_free(c); } };
struct ggml_deleter { void operator()(ggml_context * c) const { ggml_free(c); } };

// Output context: metadata plus one tensor info per planned tensor (no data: it is streamed).
std::unique_ptr<gguf_context, gguf_deleter> build_output(const dense_gguf & in, const std::vector<out_tensor> & plan,
                                                         const upcycle_params & p, const upcycle_summary & sum) {
    std::unique_ptr<gguf_context, gguf_deleter> out(gguf_init_empty());
    set_metadata(out.get(), in.gguf(), p, sum);
    ggml_init_params ip = {(plan.size() + 1) * ggml_tensor_overhead(), nullptr, /*no_alloc =*/ true};
    std::unique_ptr<ggml_context, ggml_deleter> meta(ggml_init(ip));
    for (const out_tensor & t : plan) {
        ggml_tensor * tensor = ggml_new_tensor(meta.get(), t.type, GGML_MAX_DIMS, t.ne);
        ggml_set_name(tensor, t.name.c_str());
        gguf_add_tensor(out.get(), tensor);  // copies the tensor's info; meta may go
    }
    return out;
}

// Produces output tensor bytes in file order; keeps the MoE FFN of the current layer.
class tensor_producer {
public:
    tensor_producer(const dense_gguf & in, const std::vector<out_tensor> & plan, const upcycle_params & p,
                    const moe_build_params & build)
        : in_(in), plan_(plan), params_(p), build_(build) {}

    Status operator()(int64_t id, std::vector<uint8_t> & out) {
        const out_tensor & t = plan_[(size_t) id];
        if (t.kind == source_kind::copy) {
            if (t.type == gguf_get_tensor_type(in_.gguf(), t.src_id)) return in_.read_raw(t.src_id, out);
            std::vector<float> values;  // experts none: a dense matrix converted to --type
            Status s = in_.read_f32(t.src_id, values);
            if (s) type_convert(values, t.type, t.ne[0], out);
            return s;
        }
        if (t.layer != layer_) {
            dense_ffn ffn;
            Status s = in_.read_ffn(t.layer, ffn);
            if (!s) return s;
            const unit_assignment groups = split_units(ffn, params_.n_expert, params_.split);
            moe_ = params_.experts == expert_kind::split
                       ? build_moe_ffn(ffn, groups, groups, build_)
                       : build_moe_ffn(ffn, replicate_units(ffn.n_ff, params_.n_expert), groups, build_);
            layer_ = t.layer;
        }
        switch (t.kind) {
            case source_kind::gate_inp:  type_convert(moe_.gate_inp, GGML_TYPE_F32, t.ne[0], out); break;
            case source_kind::gate_exps: type_convert(moe_.gate_exps, t.type, t.ne[0], out); break;
            case source_kind::up_exps:   type_convert(moe_.up_exps, t.type, t.ne[0], out); break;
            default:                     type_convert(moe_.down_exps, t.type, t.ne[0], out); break;
        }
        return Status::ok();
    }

private:
    const dense_gguf & in_;
    const std::vector<out_tensor> & plan_;
    const upcycle_params & params_;
    moe_build_params build_;
    int64_t layer_ = -1;
    moe_ffn moe_;
};

} // namespace

Status upcycle_check_params(const upcycle_params & p) {
    if (p.n_expert < 1 || p.n_expert > max_experts) {
        return Status::invalid_argument("--n-expert must be 1.." + std::to_string(max_experts) + ", got " + std::to_string(p.n_expert));
    }
    if (p.n_expert_used < 1) {
        return Status::invalid_argument("--n-expert-used must be at least 1, got " + std::to_string(p.n_expert_used));
    }
    if (p.n_expert_used > p.n_expert) {
        return Status::invalid_argument("--n-expert-used (" + std::to_string(p.n_expert_used) +
                                        ") must not exceed --n-expert (" + std::to_string(p.n_expert) + ")");
    }
    if (!std::isfinite(p.router_scale) || p.router_scale <= 0.0f) {
        return Status::invalid_argument("--router-scale must be a positive number");
    }
    if (p.output.empty()) return Status::invalid_argument("-o/--output is required");
    if (p.output == p.input) return Status::invalid_argument("-o/--output must differ from -i/--input");
    return Status::ok();
}

Status upcycle_run(const upcycle_params & p, upcycle_summary & sum) {
    Status s = upcycle_check_params(p);
    if (!s) return s;
    dense_gguf in;
    s = in.open(p.input);
    if (!s) return s;
    struct stat st_in, st_out;
    if (stat(p.input.c_str(), &st_in) == 0 && stat(p.output.c_str(), &st_out) == 0 &&
        st_in.st_dev == st_out.st_dev && st_in.st_ino == st_out.st_ino) {
        return Status::invalid_argument("-o/--output must differ from -i/--input (" + p.output + " is the input file)");
    }
    if (p.experts != expert_kind::none && p.n_expert > in.n_ff()) {
        return Status::invalid_argument("--n-expert (" + std::to_string(p.n_expert) + ") exceeds n_ff (" +
                                        std::to_string(in.n_ff()) + ") of " + p.input);
    }
    sum.n_layer = in.n_layer();
    sum.n_embd = in.n_embd();
    sum.n_ff = in.n_ff();
    const bool split = p.experts == expert_kind::split;
    sum.n_ff_exp = split ? expert_n_ff(in.n_ff(), p.n_expert) : in.n_ff();
    sum.n_padding = split ? sum.n_ff_exp * p.n_expert - in.n_ff() : 0;
    sum.router = split && p.n_expert_used == p.n_expert ? router_kind::zero : router_kind::gate_mean;
    // split: the k normalised weights sum to 1, about 1/k each, so x k restores each selected
    // expert's dense share; replicate: every expert is the whole FFN, weights summing to 1 suffice.
    sum.down_scale = split ? (float) p.n_expert_used : 1.0f;

    layer_exps_types(in, 0, p.type, sum.exps_type);
    const std::vector<out_tensor> plan = plan_tensors(in, {in.n_embd(), sum.n_ff_exp, p.n_expert}, p);
    s = check_plan_types(in, plan);
    if (!s) return s;
    for (const out_tensor & t : plan)
        if (t.kind == source_kind::copy && t.type != gguf_get_tensor_type(in.gguf(), t.src_id)) ++sum.n_converted;
    sum.n_tensors = (int64_t) plan.size();
    sum.graph_nodes_estimate = p.experts == expert_kind::none ? 0 : in.n_layer() * (2 * p.n_expert_used + 40);
    sum.graph_nodes_budget = std::max<int64_t>(1024, 8 * sum.n_tensors);
    auto out = build_output(in, plan, p, sum);
    moe_build_params build;
    build.router = sum.router;
    build.router_scale = p.router_scale;
    build.down_scale = sum.down_scale;
    tensor_producer producer(in, plan, p, build);
    return gguf_stream_write(out.get(), p.output, std::ref(producer), sum.n_bytes);
}

} // namespace moezip_upcycle
