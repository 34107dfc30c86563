#include "drafter.hpp"

#include <algorithm>
#include <cstring>

#include "llama-ext.h"

namespace mtp {

namespace {

constexpr size_t kResumeWindow = 32;  // rows the head catches up on after a plain stretch

}  // namespace

MtpDrafter::MtpDrafter(llama_context * target, llama_context * head, float p_min)
    : target_(target), head_(head),
      n_embd_(llama_model_n_embd_out(llama_get_model(head))),
      n_vocab_(llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(head)))),
      batch_(head),
      window_(std::min(kResumeWindow, (size_t) llama_n_batch(head) - 1)),
      p_min_(p_min) {
    if (p_min_ > 0.0f) {
        common_params_sampling sp;  // llama.cpp's draft-mtp sampler: top 10, probabilities among them
        sp.top_k = 10;
        sp.samplers = {COMMON_SAMPLER_TYPE_TOP_K};
        confidence_.reset(common_sampler_init(llama_get_model(head_), sp));
    }
    // Both contexts expose the hidden state of every row, indexed by batch
    // position. The head's MTP graphs keep all rows in their nextn output, while
    // masked mode copies only the first n_outputs rows: right for llama.cpp's
    // one-row draft batches, wrong for a fused batch whose output row is last.
    llama_set_embeddings_nextn(target_, true, /*masked=*/false);
    llama_set_embeddings_nextn(head_, true, /*masked=*/false);
    reset();
}

bool MtpDrafter::applies(const llama_model * head, common_context_seq_rm_type target_rm,
                         common_context_seq_rm_type head_rm) {
    return llama_model_n_layer_nextn(head) == 1 && target_rm != COMMON_CONTEXT_SEQ_RM_TYPE_FULL &&
           head_rm != COMMON_CONTEXT_SEQ_RM_TYPE_FULL;
}

void MtpDrafter::reset() {
    pending_tokens_.clear();
    pending_pos_.clear();
    pending_h_.clear();
    h_last_.assign((size_t) n_embd_, 0.0f);
    drafted_from_ = -1;
    cache_dropped_ = false;
    head_from_ = 0;
}

void MtpDrafter::restore(const Snapshot & s) {
    pending_tokens_ = s.tokens;
    pending_pos_ = s.pos;
    pending_h_ = s.h;
    h_last_ = s.h_last;
    cache_dropped_ = s.cache_dropped;
    drafted_from_ = -1;
    head_from_ = 0;
}

bool MtpDrafter::keep_prefix(llama_pos n, bool h_valid) {
    llama_memory_t mem = llama_get_memory(head_);
    while (!pending_pos_.empty() && pending_pos_.back() >= n) {
        pending_tokens_.pop_back();
        pending_pos_.pop_back();
        pending_h_.resize(pending_h_.size() - n_embd_);
    }
    drafted_from_ = -1;
    head_from_ = n;
    const llama_pos head_end = cache_dropped_ ? -1 : llama_memory_seq_pos_max(mem, 0) + 1;
    const bool covered = !cache_dropped_ && llama_memory_seq_pos_min(mem, 0) <= 0 &&
                         (pending_pos_.empty() ? head_end >= n
                                               : pending_pos_.front() == head_end && pending_pos_.back() + 1 == n);
    if (covered && llama_memory_seq_rm(mem, 0, n, -1)) {
        if (!h_valid) {
            h_last_.assign((size_t) n_embd_, 0.0f);  // replaced by the re-decoded row n - 1
        }
        return true;
    }
    llama_memory_seq_rm(mem, 0, -1, -1);
    pending_tokens_.clear();
    pending_pos_.clear();
    pending_h_.clear();
    cache_dropped_ = false;
    return false;
}

float MtpDrafter::draft_probability(int32_t row) {
    common_sampler_reset(confidence_.get());
    common_sampler_sample(confidence_.get(), head_, row, true);
    return common_sampler_get_candidates(confidence_.get(), true)->data[0].p;
}

void MtpDrafter::keep_last(size_t rows) {
    const size_t n = pending_tokens_.size();
    if (n <= rows) {
        return;
    }
    const size_t drop = n - rows;
    pending_tokens_.erase(pending_tokens_.begin(), pending_tokens_.begin() + drop);
    pending_pos_.erase(pending_pos_.begin(), pending_pos_.begin() + drop);
    pending_h_.erase(pending_h_.begin(), pending_h_.begin() + drop * n_embd_);
    cache_dropped_ = true;
}

void MtpDrafter::queue(llama_token token, llama_pos pos, const float * h) {
    pending_tokens_.push_back(token);
    pending_pos_.push_back(pos);
    pending_h_.insert(pending_h_.end(), h, h + n_embd_);
    if (pending_tokens_.size() >= 2 * window_) {
        keep_last(window_);  // amortised: one move per window_ rows
    }
}

void MtpDrafter::defer_prompt(const common_batch & target_batch) {
    const int32_t n = target_batch.size();
    if (n <= 0) {
        return;
    }
    const float * h_target = llama_get_embeddings_nextn(target_);
    const int32_t first = std::max(0, n - (int32_t) window_);
    if (first > 0) {
        pending_tokens_.clear();
        pending_pos_.clear();
        pending_h_.clear();
        cache_dropped_ = true;
    }
    for (int32_t k = first; k < n; ++k) {
        if (target_batch.tokens[k].pos[0] >= head_from_) {
            queue(target_batch.tokens[k].id, target_batch.tokens[k].pos[0],
                  k == 0 ? h_last_.data() : h_target + (size_t) (k - 1) * n_embd_);
        }
    }
    std::memcpy(h_last_.data(), h_target + (size_t) (n - 1) * n_embd_, sizeof(float) * n_embd_);
}

int32_t MtpDrafter::process_prompt(const common_batch & target_batch) {
    const int32_t n = target_batch.size();
    if (n <= 0) {
        return 0;
    }
    if (cache_dropped_) {
        llama_memory_seq_rm(llama_get_memory(head_), 0, -1, -1);
        cache_dropped_ = false;
    }
    if (!pending_tokens_.empty()) {  // rows kept from a previous generation: their own decode (batch capacity)
        batch_.clear();
        for (size_t i = 0; i < pending_tokens_.size(); ++i) {
            const int32_t idx = batch_.add(pending_tokens_[i], pending_pos_[i], 0, false);
            batch_.set_embd(idx, {pending_h_.data() + i * n_embd_, 1, (size_t) n_embd_});
        }
        if (const int32_t rc = llama_process(head_, LLAMA_PROCESS_TYPE_DECODE, batch_.get()); rc != 0) {
            return rc;
        }
        pending_tokens_.clear();
        pending_pos_.clear();
        pending_h_.clear();
    }
    const float * h_target = llama_get_embeddings_nextn(target_);
    batch_.clear();
    for (int32_t k = 0; k < n; ++k) {
        if (target_batch.tokens[k].pos[0] < head_from_) {
            continue;  // the head has this row; its hidden state pairs with the next
        }
        const int32_t idx = batch_.add(target_batch.tokens[k].id, target_batch.tokens[k].pos[0], 0, false);
        const float * h = k == 0 ? h_last_.data() : h_target + (size_t) (k - 1) * n_embd_;
        batch_.set_embd(idx, {h, 1, (size_t) n_embd_});
    }
    const int32_t rc = batch_.size() > 0 ? llama_process(head_, LLAMA_PROCESS_TYPE_DECODE, batch_.get()) : 0;
    if (rc == 0) {
        std::memcpy(h_last_.data(), h_target + (size_t) (n - 1) * n_embd_, sizeof(float) * n_embd_);
    }
    return rc;
}

int32_t MtpDrafter::draft(llama_token id_last, llama_pos pos, int32_t n_max, std::vector<llama_token> & out) {
    drafted_from_ = -1;
    if (n_max <= 0) {
        return 0;
    }
    keep_last(window_);
    if (cache_dropped_) {
        llama_memory_seq_rm(llama_get_memory(head_), 0, -1, -1);
        cache_dropped_ = false;
    }
    batch_.clear();
    for (size_t i = 0; i < pending_tokens_.size(); ++i) {
        const int32_t idx = batch_.add(pending_tokens_[i], pending_pos_[i], 0, false);
        batch_.set_embd(idx, {pending_h_.data() + i * n_embd_, 1, (size_t) n_embd_});
    }
    int32_t last = batch_.add(id_last, pos, 0, true);
    batch_.set_embd(last, {h_last_.data(), 1, (size_t) n_embd_});
    for (int32_t step = 0; step < n_max; ++step) {
        const int32_t rc = llama_process(head_, LLAMA_PROCESS_TYPE_DECODE, batch_.get());
        if (rc != 0) {
            return rc;
        }
        if (step == 0) {
            // The catch-up rows and (id_last, pos) are in the head's cache now.
            pending_tokens_.clear();
            pending_pos_.clear();
            pending_h_.clear();
            drafted_from_ = pos;
        }
        const float * logits = llama_get_logits_ith(head_, last);
        const llama_token id = (llama_token) (std::max_element(logits, logits + n_vocab_) - logits);
        if (confidence_ && draft_probability(last) < p_min_) {
            break;
        }
        out.push_back(id);
        if (step + 1 == n_max) {
            break;
        }
        const float * h = llama_get_embeddings_nextn_ith(head_, last);
        h_step_.assign(h, h + n_embd_);
        batch_.clear();
        last = batch_.add(id, pos + step + 1, 0, true);
        batch_.set_embd(last, {h_step_.data(), 1, (size_t) n_embd_});
    }
    return 0;
}

void MtpDrafter::accept(const common_batch & verify_batch, size_t n_accepted) {
    const float * h_target = llama_get_embeddings_nextn(target_);
    if (drafted_from_ >= 0) {
        // Keep (id_last, pos); the head's later rows paired drafts with its own state.
        llama_memory_seq_rm(llama_get_memory(head_), 0, drafted_from_ + 1, -1);
    } else {
        queue(verify_batch.tokens[0].id, verify_batch.tokens[0].pos[0], h_last_.data());
    }
    for (size_t i = 1; i <= n_accepted; ++i) {
        queue(verify_batch.tokens[i].id, verify_batch.tokens[i].pos[0], h_target + (i - 1) * n_embd_);
    }
    std::memcpy(h_last_.data(), h_target + n_accepted * n_embd_, sizeof(float) * n_embd_);
    drafted_from_ = -1;
}

}  // namespace mtp
