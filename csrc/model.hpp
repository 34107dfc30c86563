// Models: GGUF header checks, loading, tokenizer and chat-template access.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "llama-cpp.h"
#include "gguf_checks.hpp"

namespace mtp {

struct ModelOptions {
    bool load_mtp = true;
    int32_t n_gpu_layers = 0;
    bool use_mmap = true;
    bool use_mlock = false;
    // ggml RPC servers ("host:port") whose devices take offloaded layers (after local accelerators).
    std::vector<std::string> rpc_servers;
    // Share of the offloaded layers per device: each server's devices in rpc_servers order,
    // then local accelerators; empty = llama.cpp's split by free memory.
    std::vector<float> tensor_split;
    // Keep the MTP head's layers in this process's memory (else they follow n_gpu_layers).
    bool mtp_local = true;
    // Seconds to wait for each RPC server's connection and handshake.
    double rpc_timeout = 5.0;
    // A ggml device ("CPU", "CUDA0", "Vulkan0", ...) for the MTP head's layers, whatever
    // n_gpu_layers does with the trunk; "" leaves them where n_gpu_layers puts them.
    std::string mtp_device;
};


// Opens a GGUF's header (metadata only) and checks it; throws Error(ModelLoad).
GgufInfo inspect_gguf(const std::string & path);

class Model {
public:
    Model(const std::string & path, const ModelOptions & opts);

    llama_model * get() const { return model_.get(); }
    const llama_vocab * vocab() const { return llama_model_get_vocab(model_.get()); }
    const std::string & path() const { return path_; }
    const ModelOptions & options() const { return opts_; }
    const GgufInfo & info() const { return info_; }

    // Throws Error(RpcLost) when a connection to one of the model's RPC servers was lost
    // (the model's remote tensors are gone with it: reload the model).
    void check_rpc() const;
    bool uses_rpc() const { return !rpc_held_.empty(); }
    // Devices the model was loaded on ("CPU" always holds what is not offloaded).
    const std::vector<std::string> & device_names() const { return device_names_; }

    std::string architecture() const { return info_.architecture; }
    std::string description() const;
    int32_t n_vocab() const;
    int32_t n_embd() const;
    int32_t n_ctx_train() const;
    int32_t n_layer() const;
    int32_t n_mtp_heads() const;
    // The first of the MTP head's blocks (blk.{n_layer} .. blk.{block_count - 1}).
    int32_t head_first_block() const { return (int32_t) (info_.block_count - info_.n_nextn); }
    // Devices holding the weights of blocks [first, last) and, with `output`, of the
    // output norm and matrix; in ggml's device order.
    std::vector<std::string> weight_devices(int32_t first, int32_t last, bool output) const;
    uint64_t n_params() const;
    uint64_t size_bytes() const;
    std::string chat_template() const;      // "" when the GGUF has none
    bool is_mtp_sidecar() const { return info_.n_nextn > 0 && !info_.has_trunk; }
    bool has_mtp_head() const { return info_.n_nextn > 0 && info_.has_mtp_tensors; }
    bool has_mtp_graph() const { return architecture_has_mtp_graph(info_.architecture); }
    // Tokens the file's MTP head scores: N for a trimmed head (d2t), n_vocab for a full one, 0 without a head.
    int32_t draft_vocab_size() const {
        return !has_mtp_head() ? 0 : info_.n_vocab_draft > 0 ? (int32_t) info_.n_vocab_draft : n_vocab();
    }

    int32_t token_bos() const;
    int32_t token_eos() const;
    bool is_eog(int32_t token) const;

    std::vector<int32_t> tokenize(const std::string & text, bool add_special, bool parse_special) const;
    std::string detokenize(const std::vector<int32_t> & tokens, bool render_special) const;
    std::string token_piece(int32_t token, bool render_special) const;
    void check_tokens(const std::vector<int32_t> & tokens) const;

    // Mean-pooled, L2-normalised hidden states of each text (for retrieval).
    std::vector<std::vector<float>> embed(const std::vector<std::string> & texts, int32_t n_threads) const;

    // Chat messages as (role, content); template "" uses the GGUF's own.
    std::string apply_chat_template(const std::vector<std::pair<std::string, std::string>> & messages,
                                    bool add_generation_prompt, const std::string & chat_template) const;

private:
    std::string path_;
    ModelOptions opts_;
    GgufInfo info_;
    std::vector<std::string> device_names_;
    std::vector<std::string> rpc_held_;  // servers holding some of the model's tensors
    mutable std::atomic<bool> rpc_lost_{false};
    llama_model_ptr model_;
};

// Throws Error(MissingMtpHead) unless llama.cpp has an MTP draft graph for the
// head's architecture that can run the number of heads the file declares.
void require_mtp_graph(const Model & head);

}  // namespace mtp
