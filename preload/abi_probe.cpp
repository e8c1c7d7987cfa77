#include "preload/abi_probe.h"

#include <cstring>
#include <string>

namespace moezip {

namespace {

Status differs(const std::string & what, const std::string & got, const std::string & want) {
    return Status::mismatch("layout probe " + what + " is " + got + ", expected " + want);
}

// Op enum values as compiled (ggml.h) against the engine's names for them.
Status probe_op_names(const GgmlApi & api) {
    struct { ggml_op op; const char * name; } ops[] = {
        {GGML_OP_NONE, "NONE"}, {GGML_OP_ADD, "ADD"},   {GGML_OP_MUL, "MUL"},   {GGML_OP_MUL_MAT, "MUL_MAT"},
        {GGML_OP_MUL_MAT_ID, "MUL_MAT_ID"}, {GGML_OP_CONT, "CONT"}, {GGML_OP_VIEW, "VIEW"}, {GGML_OP_GET_ROWS, "GET_ROWS"},
        {GGML_OP_SOFT_MAX, "SOFT_MAX"}, {GGML_OP_ARGSORT, "ARGSORT"}, {GGML_OP_GLU, "GLU"}, {GGML_OP_REPEAT, "REPEAT"},
        {GGML_OP_ADD_ID, "ADD_ID"},
    };
    for (const auto & o : ops) {
        const char * got = api.ggml_op_name(o.op);
        if (got == nullptr || strcmp(got, o.name) != 0)
            return differs("ggml_op_name(GGML_OP_" + std::string(o.name) + " = " + std::to_string((int) o.op) + ")",
                           got ? std::string("\"") + got + "\"" : "null", std::string("\"") + o.name + "\"");
    }
    struct { ggml_type type; const char * name; size_t size; int64_t blck; } types[] = {
        {GGML_TYPE_F32, "f32", 4, 1}, {GGML_TYPE_F16, "f16", 2, 1}, {GGML_TYPE_I32, "i32", 4, 1},
        {GGML_TYPE_Q8_0, "q8_0", 34, 32}, {GGML_TYPE_Q4_K, "q4_K", 144, 256}, {GGML_TYPE_Q6_K, "q6_K", 210, 256},
    };
    for (const auto & t : types) {
        const char * got = api.ggml_type_name(t.type);
        if (got == nullptr || strcmp(got, t.name) != 0 || api.ggml_type_size(t.type) != t.size || api.ggml_blck_size(t.type) != t.blck)
            return differs("type " + std::to_string((int) t.type), std::string(got ? got : "null") + " (" +
                           std::to_string(api.ggml_type_size(t.type)) + " bytes per " + std::to_string(api.ggml_blck_size(t.type)) + ")",
                           std::string(t.name) + " (" + std::to_string(t.size) + " per " + std::to_string(t.blck) + ")");
    }
    return Status::ok();
}

// A fresh tensor read through the compiled struct ggml_tensor.
Status probe_tensor(const GgmlApi & api, const ggml_tensor * t, ggml_type type, int64_t ne0, int64_t ne1, int64_t ne2) {
    if (t->type != type || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1)
        return differs("ggml_tensor type/ne", std::to_string((int) t->type) + " [" + std::to_string(t->ne[0]) + ", " +
                       std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[2]) + ", " + std::to_string(t->ne[3]) + "]",
                       std::to_string((int) type) + " [" + std::to_string(ne0) + ", " + std::to_string(ne1) + ", " + std::to_string(ne2) + ", 1]");
    const size_t row = api.ggml_row_size(type, ne0);
    if (t->nb[0] != api.ggml_type_size(type) || t->nb[1] != row || t->nb[2] != row * ne1 || t->nb[3] != row * ne1 * ne2)
        return differs("ggml_tensor nb of " + std::string(api.ggml_type_name(type)) + " [" + std::to_string(ne0) + ", ...]",
                       std::to_string(t->nb[1]) + "/" + std::to_string(t->nb[2]), std::to_string(row) + "/" + std::to_string(row * ne1));
    if (t->data != nullptr || t->buffer != nullptr || t->view_src != nullptr || t->extra != nullptr)
        return differs("ggml_tensor data/buffer/view_src/extra of a no_alloc tensor", "non-null", "null");
    return Status::ok();
}

// The region nodes moezip reads: MUL_MAT_ID, GLU, MUL, VIEW, ADD, CONT, their src and op_params.
Status probe_nodes(const GgmlApi & api, ggml_context * ctx, ggml_tensor ** last) {
    ggml_tensor * as = api.ggml_new_tensor_3d(ctx, GGML_TYPE_Q8_0, 64, 4, 2);  // [n_embd, n_ff, n_expert]
    ggml_tensor * b = api.ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 64, 1, 3);    // [n_embd, 1, n_tokens]
    ggml_tensor * ids = api.ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 2, 3);      // [n_used, n_tokens]
    if (!as || !b || !ids) return Status::mismatch("layout probe: the engine could not create tensors");
    Status st = probe_tensor(api, as, GGML_TYPE_Q8_0, 64, 4, 2);
    if (st) st = probe_tensor(api, ids, GGML_TYPE_I32, 2, 3, 1);
    if (!st) return st;
    api.ggml_set_name(as, "moezip-probe-7");
    if (strcmp(as->name, "moezip-probe-7") != 0 || api.ggml_get_name(as) != as->name)
        return differs("ggml_tensor name", std::string("\"") + as->name + "\"", "\"moezip-probe-7\"");
    ggml_tensor * mm = api.ggml_mul_mat_id(ctx, as, b, ids);  // [n_ff, n_used, n_tokens]
    if (mm->op != GGML_OP_MUL_MAT_ID || mm->src[0] != as || mm->src[1] != b || mm->src[2] != ids)
        return differs("MUL_MAT_ID node op/src", std::string(api.ggml_op_name(mm->op)), "MUL_MAT_ID(as, b, ids)");
    st = probe_tensor(api, mm, GGML_TYPE_F32, 4, 2, 3);
    if (!st) return st;
    for (int32_t p : mm->op_params)
        if (p != 0) return differs("MUL_MAT_ID op_params of a plain ggml_mul_mat_id", "non-zero", "all zero");
    struct { ggml_glu_op op; const char * name; } glus[] = {{GGML_GLU_OP_REGLU, "REGLU"}, {GGML_GLU_OP_GEGLU, "GEGLU"},
        {GGML_GLU_OP_SWIGLU, "SWIGLU"}, {GGML_GLU_OP_SWIGLU_OAI, "SWIGLU_OAI"}, {GGML_GLU_OP_GEGLU_ERF, "GEGLU_ERF"},
        {GGML_GLU_OP_GEGLU_QUICK, "GEGLU_QUICK"}};
    ggml_tensor * act = nullptr;
    for (const auto & g : glus) {
        act = api.ggml_glu_split(ctx, mm, mm, g.op);
        int32_t p0 = 0, p1 = -1;
        memcpy(&p0, &act->op_params[0], sizeof p0);  // ggml_glu_impl: op_params = {op, swapped}
        memcpy(&p1, &act->op_params[1], sizeof p1);
        if (act->op != GGML_OP_GLU || api.ggml_get_glu_op(act) != g.op || p0 != (int32_t) g.op || p1 != 0 ||
            strcmp(api.ggml_op_desc(act), g.name) != 0)
            return differs("GLU node of GGML_GLU_OP_" + std::string(g.name) + " = " + std::to_string((int) g.op),
                           std::string(api.ggml_op_desc(act)) + " (op_params " + std::to_string(p0) + ", " + std::to_string(p1) + ")",
                           std::string(g.name) + " (op_params " + std::to_string((int) g.op) + ", 0)");
    }
    ggml_tensor * w = api.ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, 2, 3);  // [1, n_used, n_tokens]
    ggml_tensor * weighted = api.ggml_mul(ctx, act, w);
    ggml_tensor * v0 = api.ggml_view_2d(ctx, weighted, 4, 3, weighted->nb[2], 0);
    ggml_tensor * v1 = api.ggml_view_2d(ctx, weighted, 4, 3, weighted->nb[2], weighted->nb[1]);
    size_t offs = 0;
    memcpy(&offs, v1->op_params, sizeof offs);  // ggml_view_impl stores the byte offset in op_params
    if (weighted->op != GGML_OP_MUL || weighted->src[0] != act || weighted->src[1] != w)
        return differs("MUL node op/src", api.ggml_op_name(weighted->op), "MUL(act, weights)");
    if (v1->op != GGML_OP_VIEW || v1->src[0] != weighted || v1->view_src != weighted || v1->view_offs != weighted->nb[1] ||
        offs != weighted->nb[1] || v1->nb[1] != weighted->nb[2])
        return differs("VIEW node op/view_src/view_offs/op_params", std::to_string(v1->view_offs) + "/" + std::to_string(offs),
                       std::to_string(weighted->nb[1]));
    ggml_tensor * sum = api.ggml_add(ctx, v0, v1);
    if (sum->op != GGML_OP_ADD || sum->src[0] != v0 || sum->src[1] != v1)
        return differs("ADD node op/src", api.ggml_op_name(sum->op), "ADD(view 0, view 1)");
    ggml_tensor * out = api.ggml_cont(ctx, sum);
    if (out->op != GGML_OP_CONT || out->src[0] != sum) return differs("CONT node op/src", api.ggml_op_name(out->op), "CONT");
    *last = out;
    return Status::ok();
}

// struct ggml_cgraph (ggml-impl.h) as the engine fills it, also the one ggml_graph_view returns.
Status probe_graph(const GgmlApi & api, ggml_context * ctx, ggml_tensor * last) {
    ggml_cgraph * gf = api.ggml_new_graph_custom(ctx, 16, false);
    api.ggml_build_forward_expand(gf, last);
    const int n = api.ggml_graph_n_nodes(gf);
    if (gf->size != 16 || gf->n_nodes != n || n < 5)
        return differs("ggml_cgraph size/n_nodes", std::to_string(gf->size) + "/" + std::to_string(gf->n_nodes),
                       "16/" + std::to_string(n));
    for (int i = 0; i < n; ++i)
        if (gf->nodes[i] != api.ggml_graph_node(gf, i)) return differs("ggml_cgraph nodes[" + std::to_string(i) + "]", "another tensor", "ggml_graph_node()");
    if (gf->nodes[n - 1] != last) return differs("ggml_cgraph last node", gf->nodes[n - 1]->name, "the expanded tensor");
    ggml_cgraph view = api.ggml_graph_view(gf, 1, 3);
    if (view.n_nodes != 2 || view.nodes != gf->nodes + 1 || view.size != 0)
        return differs("ggml_graph_view(g, 1, 3) n_nodes/nodes", std::to_string(view.n_nodes), "2 nodes from index 1");
    return Status::ok();
}

} // namespace

Status abi_probe_layout(const GgmlApi & api) {
    if (!api.base_bound) return Status::not_found("layout probe: libggml-base is not bound");
    Status st = probe_op_names(api);
    if (!st) return st;
    ggml_init_params params = {/*mem_size =*/ 32 * api.ggml_tensor_overhead() + api.ggml_graph_overhead_custom(16, false),
                               /*mem_buffer =*/ nullptr, /*no_alloc =*/ true};
    ggml_context * ctx = api.ggml_init(params);
    if (ctx == nullptr) return Status::mismatch("layout probe: ggml_init failed");
    ggml_tensor * last = nullptr;
    st = probe_nodes(api, ctx, &last);
    if (st) st = probe_graph(api, ctx, last);
    api.ggml_free(ctx);
    return st;
}

} // namespace moezip
