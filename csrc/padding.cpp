#include "padding.hpp"

#include <algorithm>
#include <cstdlib>

namespace mtp {

bool pads_shared_decodes(const llama_model * model, int32_t n_seq) {
    const char * off = std::getenv("MTP_LLM_NO_PADDING");
    return (off == nullptr || *off == '\0') && n_seq > 1 && llama_model_n_swa(model) == 0 &&
           !llama_model_is_recurrent(model) && !llama_model_is_hybrid(model);
}

int32_t DecodePadding::rows_per_sequence(llama_context * ctx,
                                         const std::vector<std::pair<llama_seq_id, int32_t>> & segments) {
    if (segments.size() < 2) {
        return 0;
    }
    int32_t rows = 0, longest = 0;
    for (size_t i = 0; i < segments.size(); ++i) {
        if (i > 0 && segments[i].first <= segments[i - 1].first) {
            return 0;  // not in sequence order (callers list them in order; padding relies on it)
        }
        rows += segments[i].second;
        longest = std::max(longest, segments[i].second);
    }
    const llama_seq_id first = segments.front().first, last = segments.back().first;
    const int32_t padded = (last - first + 1) * longest;
    if (padded == rows || padded > 2 * rows || padded > (int32_t) llama_n_batch(ctx)) {
        return 0;
    }
    llama_memory_t mem = llama_get_memory(ctx);
    const llama_pos n_ctx = (llama_pos) llama_n_ctx_seq(ctx);
    for (llama_seq_id seq = first; seq <= last; ++seq) {
        if (llama_memory_seq_pos_max(mem, seq) + 1 + longest > n_ctx) {
            return 0;
        }
    }
    return longest;
}

void DecodePadding::add(common_batch & batch, llama_seq_id seq, llama_pos from, int32_t n, const float * embd,
                        size_t n_embd) {
    if (n <= 0) {
        return;
    }
    added_.emplace_back(seq, from);
    rows_ += (size_t) n;
    for (int32_t i = 0; i < n; ++i) {
        const int32_t idx = batch.add(0, from + i, seq, false);
        if (embd != nullptr) {
            batch.set_embd(idx, {embd, 1, n_embd});
        }
    }
}

void DecodePadding::add_idle(llama_context * ctx, common_batch & batch, llama_seq_id seq, int32_t n,
                             const float * embd, size_t n_embd) {
    add(batch, seq, llama_memory_seq_pos_max(llama_get_memory(ctx), seq) + 1, n, embd, n_embd);
}

void DecodePadding::drop(llama_context * ctx) {
    llama_memory_t mem = llama_get_memory(ctx);
    for (const auto & [seq, from] : added_) {
        llama_memory_seq_rm(mem, seq, from, -1);
    }
    added_.clear();
}

}  // namespace mtp
