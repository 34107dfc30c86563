// What a session says about itself: sizes, devices, caches, which draft source runs.
#include "session.hpp"

#include "ggml-backend.h"
#include "llama-ext.h"  // llama_get_memory_breakdown: where a context's KV cache is

namespace mtp {

int32_t Session::n_ctx() const { return (int32_t) llama_n_ctx(ctx_tgt_.get()); }

int32_t Session::n_ctx_slot() const { return (int32_t) llama_n_ctx_seq(ctx_tgt_.get()); }

std::string Session::flash_attn() const {
    switch (flash_attn_type_) {
        case LLAMA_FLASH_ATTN_TYPE_ENABLED: return "on";
        case LLAMA_FLASH_ATTN_TYPE_DISABLED: return "off";
        default: return "auto";
    }
}

static std::vector<std::string> kv_devices(const llama_context * ctx) {
    std::vector<std::string> out;
    for (const auto & [buft, memory] : llama_get_memory_breakdown(ctx)) {
        if (memory.context > 0) {
            out.push_back(buffer_device_name(buft));
        }
    }
    return out;
}

std::map<std::string, std::vector<std::string>> Session::devices() const {
    std::map<std::string, std::vector<std::string>> out;
    auto & target = out["target"];
    const int32_t trunk = target_->head_first_block();
    target = target_->weight_devices(0, target_->info().n_nextn > 0 ? trunk : INT32_MAX, true);
    for (auto & d : kv_devices(ctx_tgt_.get())) target.push_back(d);
    sort_device_names(target);
    if (ctx_dft_ && head_ != nullptr) {
        auto & mtp = out["mtp"];
        mtp = head_->weight_devices(head_->head_first_block(), INT32_MAX, false);
        for (auto & d : kv_devices(ctx_dft_.get())) mtp.push_back(d);
        sort_device_names(mtp);
    }
    return out;
}

uint64_t Session::cache_bytes() const {
    uint64_t n = 0;
    for (const llama_context * ctx : {ctx_tgt_.get(), ctx_dft_.get()}) {
        if (ctx) {
            for (const auto & [buft, memory] : llama_get_memory_breakdown(ctx)) {
                n += memory.context;
            }
        }
    }
    return n;
}

std::string Session::mtp_driver() const { return source_ ? source_->name() : "none"; }

int32_t Session::draft_vocab_size() const { return source_ && head_ != nullptr ? head_->draft_vocab_size() : 0; }

std::string Session::rollback_mode() const {
    if (!source_) {
        return "none";  // plain decoding never rolls back
    }
    switch (rollback_.target) {
        case COMMON_CONTEXT_SEQ_RM_TYPE_NO: return "none";
        case COMMON_CONTEXT_SEQ_RM_TYPE_PART: return "partial";
        case COMMON_CONTEXT_SEQ_RM_TYPE_FULL: return "checkpoint";
        case COMMON_CONTEXT_SEQ_RM_TYPE_RS: return "rs";
    }
    return "unknown";
}

}  // namespace mtp
