// mtp_llm's own driver of llama.cpp's MTP draft context (single-head models).
//
// llama.cpp's common_speculative draft-mtp driver spends one head decode per
// iteration catching the head's KV cache up on the accepted tokens, then one
// decode per draft step. Here the catch-up rows ride in the same decode as the
// first draft step, so an iteration costs exactly n_draft head decodes. The row
// inputs (token, position, hidden state) are the ones common_speculative uses:
// each token is paired with the target's hidden state at the previous position.
#pragma once

#include <cstdint>
#include <vector>

#include "common.h"
#include "sampling.h"
#include "llama.h"

namespace mtp {

class MtpDrafter {
public:
    // p_min: stop drafting at a token whose probability among the head's top 10
    // is below it (llama.cpp's draft p_min; 0 = never).
    MtpDrafter(llama_context * target, llama_context * head, float p_min);

    // The fused driver covers single-head models whose caches roll back in place;
    // chained heads and checkpointed (recurrent) caches keep llama.cpp's driver.
    static bool applies(const llama_model * head, common_context_seq_rm_type target_rm,
                        common_context_seq_rm_type head_rm);

    // Start of a generation (both caches are empty): the first row pairs with zeros.
    void reset();
    // A generation that reuses the first `n` positions of the previous one: keep what
    // the head has (or has queued) of them and drop the rest. False when the head does
    // not cover them all (its cache was dropped in a plain stretch): then it starts
    // afresh at position n. `h_valid`: the hidden state kept for the row at n is the
    // target's at n - 1 (the previous generation ended exactly there).
    bool keep_prefix(llama_pos n, bool h_valid);
    // Rows the target just decoded (a prompt chunk, positions in order): decoded
    // into the head's cache with the hidden state of each previous row. Returns
    // llama_process's code (0 = ok).
    int32_t process_prompt(const common_batch & target_batch);
    // The same rows, kept for later instead of decoded now (plain decoding: the
    // head only needs them once it drafts again).
    void defer_prompt(const common_batch & target_batch);
    // Proposes up to n_max tokens following `id_last` at `pos` (appended to `out`);
    // the pending catch-up rows are decoded with the first step. Returns
    // llama_process's code (0 = ok).
    int32_t draft(llama_token id_last, llama_pos pos, int32_t n_max, std::vector<llama_token> & out);
    // The target verified `verify_batch` = [id_last, drafts...] and accepted the
    // first n_accepted drafts: drop the head's speculative rows and queue the
    // accepted ones (with the target's hidden states) for the next draft.
    void accept(const common_batch & verify_batch, size_t n_accepted);
    // Rows waiting for the head's next decode (the catch-up of its next draft).
    size_t pending_rows() const { return pending_tokens_.size(); }

    // What the driver holds beside the head's cache (queued rows, the carried hidden
    // state), saved and restored with it by the session's prompt cache.
    struct Snapshot {
        std::vector<llama_token> tokens;
        std::vector<llama_pos> pos;
        std::vector<float> h, h_last;
        bool cache_dropped = false;
        size_t bytes() const { return tokens.size() * 8 + (h.size() + h_last.size()) * sizeof(float); }
    };
    Snapshot snapshot() const { return {pending_tokens_, pending_pos_, pending_h_, h_last_, cache_dropped_}; }
    void restore(const Snapshot & s);

private:
    void queue(llama_token token, llama_pos pos, const float * h);
    void keep_last(size_t rows);
    float draft_probability(int32_t row);  // the drafted token's probability as llama.cpp's driver sees it

    // While the target decodes without drafting, the head keeps at most the last
    // `window_` rows to catch up on: a longer plain stretch drops the head's cache
    // (positions must stay contiguous) and resumes from the window alone, so
    // drafting again costs one batched decode of at most window_ rows.
    size_t window_ = 0;
    bool cache_dropped_ = false;  // rows were dropped: clear the head's cache before the next decode
    llama_pos head_from_ = 0;     // prompt rows before this position are already in the head (or queued)
    float p_min_ = 0.0f;
    common_sampler_ptr confidence_;  // only with p_min > 0
    llama_context * target_;
    llama_context * head_;
    int32_t n_embd_ = 0;
    int32_t n_vocab_ = 0;
    common_batch batch_;
    // Rows not yet in the head's cache.
    std::vector<llama_token> pending_tokens_;
    std::vector<llama_pos> pending_pos_;
    std::vector<float> pending_h_;   // [rows, n_embd]
    std::vector<float> h_last_;      // pairs with the next id_last
    std::vector<float> h_step_;      // the head's own state between draft steps
    llama_pos drafted_from_ = -1;    // position of the last draft()'s first row, -1 if none
};

}  // namespace mtp
