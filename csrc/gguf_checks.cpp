#include "gguf_checks.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <unordered_map>

#include "errors.hpp"
#include "ggml.h"
#include "gguf.h"
#include "llama-hparams.h"  // LLAMA_MAX_LAYERS, LLAMA_MAX_EXPERTS: the loader's asserted bounds

namespace mtp {

namespace {

int64_t gguf_int(const gguf_context * ctx, const std::string & key) {
    const int64_t id = gguf_find_key(ctx, key.c_str());
    if (id < 0) {
        return 0;
    }
    switch (gguf_get_kv_type(ctx, id)) {
        case GGUF_TYPE_UINT8:  return gguf_get_val_u8(ctx, id);
        case GGUF_TYPE_INT8:   return gguf_get_val_i8(ctx, id);
        case GGUF_TYPE_UINT16: return gguf_get_val_u16(ctx, id);
        case GGUF_TYPE_INT16:  return gguf_get_val_i16(ctx, id);
        case GGUF_TYPE_UINT32: return gguf_get_val_u32(ctx, id);
        case GGUF_TYPE_INT32:  return gguf_get_val_i32(ctx, id);
        case GGUF_TYPE_UINT64: return (int64_t) gguf_get_val_u64(ctx, id);
        case GGUF_TYPE_INT64:  return gguf_get_val_i64(ctx, id);
        default: return 0;
    }
}

}  // namespace

const std::vector<std::string> & mtp_graph_architectures() {
    // The architectures whose build_arch_graph handles LLM_GRAPH_TYPE_DECODER_MTP
    // in src/models/*.cpp of the pinned llama.cpp (grep LLM_GRAPH_TYPE_DECODER_MTP); "llama"
    // through patches/llama.cpp/0005-llama-mtp-graph.patch.
    static const std::vector<std::string> archs = {
        "bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "glm4moe", "glm5-next",
        "hy_v3",       "llama",      "mimo2",      "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next", "step35",
    };
    return archs;
}

namespace {

// The largest value of an integer key, or of the elements of an integer array key; -1 when absent
// or not an integer.
int64_t gguf_int_max(const gguf_context * ctx, const std::string & key) {
    const int64_t id = gguf_find_key(ctx, key.c_str());
    if (id < 0) return -1;
    if (gguf_get_kv_type(ctx, id) != GGUF_TYPE_ARRAY) return gguf_int(ctx, key);
    const gguf_type type = gguf_get_arr_type(ctx, id);
    if (type == GGUF_TYPE_STRING || type == GGUF_TYPE_ARRAY) return -1;
    const auto * data = static_cast<const uint8_t *>(gguf_get_arr_data(ctx, id));
    int64_t best = -1;
    for (size_t i = 0; i < gguf_get_arr_n(ctx, id); ++i) {
        int64_t v = -1;
        switch (type) {
            case GGUF_TYPE_UINT8:  v = ((const uint8_t *) data)[i]; break;
            case GGUF_TYPE_INT8:   v = ((const int8_t *) data)[i]; break;
            case GGUF_TYPE_UINT16: v = ((const uint16_t *) data)[i]; break;
            case GGUF_TYPE_INT16:  v = ((const int16_t *) data)[i]; break;
            case GGUF_TYPE_UINT32: v = ((const uint32_t *) data)[i]; break;
            case GGUF_TYPE_INT32:  v = ((const int32_t *) data)[i]; break;
            case GGUF_TYPE_UINT64: v = (int64_t) ((const uint64_t *) data)[i]; break;
            case GGUF_TYPE_INT64:  v = ((const int64_t *) data)[i]; break;
            default: return -1;
        }
        best = std::max(best, v);
    }
    return best;
}

// llama.cpp's hyperparameter loader (llama_model_base::load_hparams) asserts on these
// values instead of throwing, which would abort the process: check them first.
void check_hparams(const gguf_context * ctx, const std::string & arch, const std::string & path) {
    auto bad = [&](const std::string & key, int64_t value, const std::string & rule) {
        fail(ErrorKind::ModelLoad, "GGUF file is corrupt or unsupported: " + key + " = " + std::to_string(value) +
                                       " (" + rule + "): '" + path + "'");
    };
    const int64_t n_layer = gguf_int_max(ctx, arch + ".block_count");
    if (gguf_find_key(ctx, (arch + ".block_count").c_str()) >= 0 && (n_layer < 1 || n_layer > LLAMA_MAX_LAYERS)) {
        bad(arch + ".block_count", n_layer, "must be 1.." + std::to_string(LLAMA_MAX_LAYERS));
    }
    const int64_t n_nextn = gguf_int_max(ctx, arch + ".nextn_predict_layers");
    if (n_nextn > n_layer && n_layer >= 1) {
        bad(arch + ".nextn_predict_layers", n_nextn, "must not exceed block_count " + std::to_string(n_layer));
    }
    const int64_t n_expert = std::max<int64_t>(0, gguf_int_max(ctx, arch + ".expert_count"));
    const int64_t n_used = std::max<int64_t>(0, gguf_int_max(ctx, arch + ".expert_used_count"));
    const int64_t n_groups = std::max<int64_t>(0, gguf_int_max(ctx, arch + ".expert_group_count"));
    const int64_t n_group_used = std::max<int64_t>(0, gguf_int_max(ctx, arch + ".expert_group_used_count"));
    if (n_expert > LLAMA_MAX_EXPERTS) bad(arch + ".expert_count", n_expert, "must be at most " + std::to_string(LLAMA_MAX_EXPERTS));
    if (n_used > n_expert) bad(arch + ".expert_used_count", n_used, "must not exceed expert_count " + std::to_string(n_expert));
    if (n_expert > 0) {
        if (n_used == 0) bad(arch + ".expert_used_count", n_used, "must be positive when expert_count > 0");
        if (n_groups >= n_expert) bad(arch + ".expert_group_count", n_groups, "must be below expert_count");
        if (n_groups > 1 && (n_expert % n_groups != 0 || n_group_used == 0 || n_group_used >= n_groups)) {
            bad(arch + ".expert_group_count", n_groups, "must divide expert_count, with 0 < expert_group_used_count < it");
        }
    } else if (n_groups != 0) {
        bad(arch + ".expert_group_count", n_groups, "must be 0 without experts");
    }
    // The MoE graph builder aborts on a gating function it does not know (metadata fuzz, glm4moe).
    if (const int64_t gating = gguf_int_max(ctx, arch + ".expert_gating_func");
        gating > LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS) {
        bad(arch + ".expert_gating_func", gating, "must be 0 (the architecture's default) .. 4 (llama.cpp's known functions)");
    }
    // ggml's CPU rope and norm kernels assert on these at the first decode.
    const int64_t n_head_id = gguf_find_key(ctx, (arch + ".attention.head_count").c_str());
    const bool scalar_heads = n_head_id >= 0 && gguf_get_kv_type(ctx, n_head_id) != GGUF_TYPE_ARRAY;
    const int64_t key_length = gguf_int_max(ctx, arch + ".attention.key_length");
    const int64_t n_head0 = scalar_heads ? gguf_int_max(ctx, arch + ".attention.head_count") : -1;
    const int64_t n_embd0 = gguf_int_max(ctx, arch + ".embedding_length");
    const int64_t head_size = key_length >= 0 ? key_length : (n_head0 > 0 && n_embd0 > 0 ? n_embd0 / n_head0 : -1);
    const int64_t n_rot = gguf_int_max(ctx, arch + ".rope.dimension_count");
    // 0 also: the hybrid (qwen35) graph never finished a decode with it (metadata fuzz).
    if (n_rot >= 0 && (n_rot == 0 || n_rot % 2 != 0 || (head_size >= 0 && n_rot > head_size))) {
        bad(arch + ".rope.dimension_count", n_rot,
            "must be even, positive and at most the head size " + std::to_string(head_size));
    }
    const int64_t sections_id = gguf_find_key(ctx, (arch + ".rope.dimension_sections").c_str());
    if (sections_id >= 0 && gguf_get_kv_type(ctx, sections_id) == GGUF_TYPE_ARRAY &&
        gguf_get_arr_type(ctx, sections_id) == GGUF_TYPE_INT32) {
        const auto * sections = static_cast<const int32_t *>(gguf_get_arr_data(ctx, sections_id));
        int64_t total = 0;
        bool negative = false;
        for (size_t i = 0; i < gguf_get_arr_n(ctx, sections_id); ++i) {
            total += sections[i];
            negative = negative || sections[i] < 0;
        }
        if (negative || (head_size >= 0 && total > head_size)) {
            bad(arch + ".rope.dimension_sections (sum)", total,
                "sections must be non-negative and sum to at most the head size " + std::to_string(head_size));
        }
        const size_t n_sections = gguf_get_arr_n(ctx, sections_id);
        if (n_sections >= 3 && sections[0] <= 0 && sections[1] <= 0 && sections[2] <= 0) {
            // ggml's multi-section rope asserts that one of the first three is set.
            bad(arch + ".rope.dimension_sections[0..2]", 0, "one of the first three sections must be positive");
        }
    }
    // Hybrid models put full attention in every N-th layer (il % N): 0 divides by zero.
    if (const int64_t interval = gguf_int_max(ctx, arch + ".full_attention_interval"); interval == 0) {
        bad(arch + ".full_attention_interval", interval, "must be at least 1");
    }
    for (const char * suffix : {".attention.layer_norm_rms_epsilon", ".attention.layer_norm_epsilon"}) {
        const int64_t id = gguf_find_key(ctx, (arch + suffix).c_str());
        if (id >= 0 && gguf_get_kv_type(ctx, id) == GGUF_TYPE_FLOAT32) {
            const float eps = gguf_get_val_f32(ctx, id);
            if (!(eps >= 0.0f) || !std::isfinite(eps)) {
                fail(ErrorKind::ModelLoad, "GGUF file is corrupt or unsupported: " + arch + suffix + " = " +
                                               std::to_string(eps) + " (must be a finite non-negative number): '" +
                                               path + "'");
            }
        }
    }

    // Graph builders that assert rotary dimension == key head size == value head size
    // (llama.cpp throws this only for llama-like architectures, at load time).
    if ((arch == "hy_v3" || arch == "cohere2moe") && head_size >= 0) {
        const int64_t value_len = gguf_int_max(ctx, arch + ".attention.value_length");
        if (n_rot >= 0 && n_rot != head_size) {
            bad(arch + ".rope.dimension_count", n_rot, "must equal the head size " + std::to_string(head_size));
        }
        if (value_len >= 0 && value_len != head_size) {
            bad(arch + ".attention.value_length", value_len, "must equal the key head size " + std::to_string(head_size));
        }
    }
    // Gated DeltaNet hybrids: the loader sizes value heads by ssm.state_size, the graph by
    // ssm.inner_size / ssm.time_step_rank, and ggml asserts when they disagree.
    if (arch == "qwen35" || arch == "qwen35moe" || arch == "qwen3next") {
        const int64_t d_inner = gguf_int_max(ctx, arch + ".ssm.inner_size");
        const int64_t d_state = gguf_int_max(ctx, arch + ".ssm.state_size");
        const int64_t v_heads = gguf_int_max(ctx, arch + ".ssm.time_step_rank");
        const int64_t k_heads = gguf_int_max(ctx, arch + ".ssm.group_count");
        if (d_inner >= 0 && d_state >= 0 && v_heads >= 0 && d_inner != d_state * v_heads) {
            bad(arch + ".ssm.inner_size", d_inner,
                "must equal ssm.state_size x ssm.time_step_rank = " + std::to_string(d_state * v_heads));
        }
        if (v_heads >= 0 && k_heads >= 0 && (k_heads == 0 || v_heads % k_heads != 0)) {
            bad(arch + ".ssm.time_step_rank", v_heads, "must be a multiple of ssm.group_count " + std::to_string(k_heads));
        }
    }
    const int64_t scaling = gguf_find_key(ctx, (arch + ".rope.scaling.type").c_str());
    if (scaling >= 0 && gguf_get_kv_type(ctx, scaling) == GGUF_TYPE_STRING) {
        const std::string type = gguf_get_val_str(ctx, scaling);
        if (type != "none" && type != "linear" && type != "yarn" && type != "longrope") {
            fail(ErrorKind::ModelLoad, "GGUF file is corrupt or unsupported: " + arch + ".rope.scaling.type = '" + type +
                                           "' (must be none, linear, yarn or longrope): '" + path + "'");
        }
    }
}

}  // namespace

bool architecture_has_mtp_graph(const std::string & architecture) {
    const auto & archs = mtp_graph_architectures();
    return std::find(archs.begin(), archs.end(), architecture) != archs.end();
}

const std::vector<std::string> & single_head_mtp_architectures() {
    // MTP graphs that assert n_layer_nextn == 1 (grep "n_layer_nextn == 1" src/models/*.cpp).
    static const std::vector<std::string> archs = {
        "bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa",
        "glm4moe",     "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next",
    };
    return archs;
}

const std::vector<std::string> & draft_vocab_architectures() {
    static const std::vector<std::string> archs = {"hy_v3", "llama", "qwen35", "qwen35moe"};
    return archs;
}

namespace {

void check_tensor_types(const ggml_context * meta, const std::string & path) {
    // Converters store every 1-D tensor (norms, biases, scales) as f32, and ggml's CPU
    // element-wise kernels abort on other types there.
    for (ggml_tensor * t = ggml_get_first_tensor(meta); t != nullptr; t = ggml_get_next_tensor(meta, t)) {
        if (ggml_n_dims(t) == 1 && t->type != GGML_TYPE_F32 && std::string_view(t->name) != "d2t") {  // d2t: checked below
            fail(ErrorKind::ModelLoad, std::string("GGUF file is corrupt or unsupported: 1-D tensor '") + t->name +
                                           "' is stored as " + ggml_type_name(t->type) +
                                           " (norms and biases must be f32; re-convert the model): '" + path + "'");
        }
    }
}

// A trimmed draft vocabulary (patch 0007): `d2t` (I64, [N]) maps the N rows of each head's
// nextn.shared_head_head to target ids. llama.cpp scatters the head's logits with it
// (ggml_set_rows, which asserts on an out-of-range id), so every id is read and checked here.
void check_draft_vocab(GgufInfo & info, const gguf_context * ctx, const ggml_context * meta, const std::string & path) {
    const int64_t tid = gguf_find_tensor(ctx, "d2t");
    if (tid < 0) {
        return;
    }
    auto bad = [&](const std::string & why) {
        fail(ErrorKind::ModelLoad, "GGUF file has an invalid trimmed draft vocabulary: " + why + ": '" + path + "'");
    };
    const auto & archs = draft_vocab_architectures();
    if (std::find(archs.begin(), archs.end(), info.architecture) == archs.end()) {
        std::string known;
        for (const auto & a : archs) known += (known.empty() ? "" : ", ") + a;
        bad("architecture '" + info.architecture + "' has no MTP graph for one (" + known + " have)");
    }
    const ggml_tensor * d2t = ggml_get_tensor(const_cast<ggml_context *>(meta), "d2t");
    const int64_t n = d2t ? d2t->ne[0] : 0;
    if (d2t == nullptr || d2t->type != GGML_TYPE_I64 || ggml_n_dims(d2t) != 1) {
        bad(std::string("d2t must be a 1-D I64 tensor, not ") + (d2t ? ggml_type_name(d2t->type) : "?") +
            " with " + std::to_string(d2t ? ggml_n_dims(d2t) : 0) + " dimensions");
    }
    if (n < 1 || n > info.n_vocab) {
        bad("d2t has " + std::to_string(n) + " entries (must be 1.." + std::to_string(info.n_vocab) + ")");
    }
    if (info.n_nextn < 1) {
        bad("d2t without an MTP head (" + info.architecture + ".nextn_predict_layers is 0)");
    }
    for (int64_t il = info.block_count - info.n_nextn; il < info.block_count; ++il) {
        const std::string name = "blk." + std::to_string(il) + ".nextn.shared_head_head.weight";
        const ggml_tensor * head = ggml_get_tensor(const_cast<ggml_context *>(meta), name.c_str());
        if (head == nullptr && split_count(ctx) > 1) {
            continue;  // in another part of a split GGUF (llama.cpp's loader checks its shape there)
        }
        if (head == nullptr) {
            bad("d2t needs each head's own LM head " + name + " with " + std::to_string(n) + " rows; it is absent");
        }
        if (head->ne[1] != n) {
            bad(name + " has " + std::to_string(head->ne[1]) + " rows but d2t has " + std::to_string(n) + " entries");
        }
    }
    std::vector<int64_t> ids((size_t) n);
    std::ifstream in(path, std::ios::binary);
    in.seekg((std::streamoff) (gguf_get_data_offset(ctx) + gguf_get_tensor_offset(ctx, tid)));
    in.read(reinterpret_cast<char *>(ids.data()), (std::streamsize) (n * sizeof(int64_t)));
    if (!in) {
        bad("d2t's data is truncated");
    }
    std::vector<bool> seen((size_t) info.n_vocab, false);
    for (int64_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= info.n_vocab) {
            bad("d2t[" + std::to_string(i) + "] = " + std::to_string(ids[i]) + " is not a token id (0.." +
                std::to_string(info.n_vocab - 1) + ")");
        }
        if (seen[(size_t) ids[i]]) {
            bad("d2t lists token " + std::to_string(ids[i]) + " twice");
        }
        seen[(size_t) ids[i]] = true;
    }
    info.n_vocab_draft = n;
}

// A file shorter than its header says (an interrupted download or copy): llama.cpp would report one
// tensor "not within the file bounds", or the draft vocabulary check read past the end.
void check_file_size(const gguf_context * ctx, const std::string & path) {
    size_t end = gguf_get_data_offset(ctx);
    for (int64_t i = 0; i < gguf_get_n_tensors(ctx); ++i) {
        end = std::max(end, gguf_get_data_offset(ctx) + gguf_get_tensor_offset(ctx, i) + gguf_get_tensor_size(ctx, i));
    }
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec && size < end) {
        fail(ErrorKind::ModelLoad, "'" + path + "' is truncated: " + std::to_string(size) + " bytes of the " +
                                       std::to_string(end) + " its header describes (an incomplete download or "
                                       "copy): download or copy it again");
    }
}

// A file of MTP head tensors alone, without the trunk's vocabulary (the head the package ships, which
// mtp_llm.smollm2 embeds into its trunk): neither a model nor a sidecar llama.cpp can load.
void check_not_head_only(const GgufInfo & info, const gguf_context * ctx, const std::string & path) {
    if (info.n_vocab == 0 && info.n_nextn > 0 && !info.has_trunk && split_count(ctx) <= 1 &&
        gguf_find_tensor(ctx, "token_embd.weight") < 0) {
        fail(ErrorKind::ModelLoad,
             "'" + path + "' holds only an MTP head's tensors (no trunk, no vocabulary): it is not a model, nor a "
             "sidecar to pass as draft_model (a sidecar carries its trunk's vocabulary: `mtp-llm draft-head "
             "MODEL` writes one from a model with an embedded head)");
    }
}

// Which parts of the model a file's tensors hold (a split GGUF's later files add theirs).
void add_tensor_facts(GgufInfo & info, const gguf_context * ctx) {
    info.has_trunk = info.has_trunk || gguf_find_tensor(ctx, "blk.0.attn_norm.weight") >= 0;
    const int64_t first_head = info.block_count - info.n_nextn;
    const std::string probe = "blk." + std::to_string(first_head) + ".nextn.eh_proj.weight";
    info.has_mtp_tensors = info.has_mtp_tensors || (info.n_nextn > 0 && gguf_find_tensor(ctx, probe.c_str()) >= 0);
}

}  // namespace

GgufInfo read_gguf_info(const gguf_context * ctx, const ggml_context * meta, const std::string & path) {
    check_file_size(ctx, path);
    check_tensor_types(meta, path);

    GgufInfo info;
    const int64_t arch_id = gguf_find_key(ctx, "general.architecture");
    if (arch_id < 0 || gguf_get_kv_type(ctx, arch_id) != GGUF_TYPE_STRING) {
        fail(ErrorKind::ModelLoad, "GGUF file has no general.architecture: '" + path + "'");
    }
    info.architecture = gguf_get_val_str(ctx, arch_id);
    const std::string & a = info.architecture;
    check_hparams(ctx, a, path);
    info.n_embd = gguf_int(ctx, a + ".embedding_length");
    info.n_nextn = gguf_int(ctx, a + ".nextn_predict_layers");
    info.block_count = gguf_int(ctx, a + ".block_count");
    const int64_t tok_id = gguf_find_key(ctx, "tokenizer.ggml.tokens");
    info.n_vocab = tok_id >= 0 ? (int64_t) gguf_get_arr_n(ctx, tok_id) : 0;
    // llama.cpp's vocabulary loader asserts (aborting the process) when a token string repeats.
    if (tok_id >= 0 && gguf_get_kv_type(ctx, tok_id) == GGUF_TYPE_ARRAY &&
        gguf_get_arr_type(ctx, tok_id) == GGUF_TYPE_STRING) {
        std::unordered_map<std::string_view, int64_t> seen;
        seen.reserve((size_t) info.n_vocab);
        for (int64_t i = 0; i < info.n_vocab; ++i) {
            const auto [it, inserted] = seen.emplace(gguf_get_arr_str(ctx, tok_id, (size_t) i), i);
            if (!inserted) {
                fail(ErrorKind::ModelLoad, "GGUF file is corrupt: its vocabulary lists the same token twice (ids " +
                                               std::to_string(it->second) + " and " + std::to_string(i) + "): '" +
                                               path + "'");
            }
        }
    }
    add_tensor_facts(info, ctx);
    check_not_head_only(info, ctx, path);
    check_draft_vocab(info, ctx, meta, path);
    return info;
}

int64_t split_count(const gguf_context * ctx) { return gguf_int(ctx, "split.count"); }

int64_t split_index(const gguf_context * ctx) { return gguf_int(ctx, "split.no"); }

void read_split_part(GgufInfo & info, const gguf_context * ctx, const ggml_context * meta, const std::string & path) {
    check_file_size(ctx, path);
    check_tensor_types(meta, path);
    add_tensor_facts(info, ctx);
    check_draft_vocab(info, ctx, meta, path);
}

}  // namespace mtp
