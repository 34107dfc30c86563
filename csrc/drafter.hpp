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
#include <random>
#include <utility>
#include <vector>

#include "common.h"
#include "draft_distributions.hpp"
#include "padding.hpp"
#include "sampling.h"
#include "llama.h"

namespace mtp {

class DraftGrammar;

// How a draft is sampled from the head for verification by rejection: from softmax(logits / temp)
// over the tokens the target's truncation keeps, with the probabilities appended to `q` (a row per
// drafted token).
struct HeadSampling {
    float temp;
    std::mt19937_64 * rng;
    DraftDistributions * q;
    // The target's truncation, applied to the head's logits as the target's chain applies it
    // (top-k, then top-p and min-p on the untempered softmax), so that q covers what p covers.
    int32_t top_k = 0;
    float top_p = 1.0f;
    float min_p = 0.0f;
};

// Draws drafts as HeadSampling says; shared by both drivers (fused_head.cpp, upstream_head.cpp).
class HeadSampler {
public:
    // A token sampled from the head's `logits` (-inf rows, a trimmed head's other tokens, are
    // never drawn); its q row is appended. -1 when truncation keeps nothing.
    // `ids`: the tokens of the n logits where the row holds candidates only (a backend sampler's
    // top k); null: the row is the whole vocabulary (n = n_vocab). `grammar`: only the tokens it
    // allows among the head's best kGrammarScan are drawn (q is the head's distribution over them).
    llama_token sample(const float * logits, const llama_token * ids, int32_t n, int32_t n_vocab,
                       const HeadSampling & sampling, DraftGrammar * grammar = nullptr);

    // Under a grammar, the head's best tokens checked against it.
    static constexpr int32_t kGrammarScan = 128;

private:
    std::vector<std::pair<float, llama_token>> kept_;  // scratch: the tokens truncation keeps
};

class MtpDrafter {
public:
    // n_seq: the sequences the contexts hold (one per parallel slot). p_min: stop
    // drafting at a token whose probability among the head's top 10 is below it
    // (llama.cpp's draft p_min; 0 = never).
    MtpDrafter(llama_context * target, llama_context * head, int32_t n_seq, float p_min);

    // The fused driver covers single-head models whose caches roll back in place;
    // chained heads and checkpointed (recurrent) caches keep llama.cpp's driver.
    static bool applies(const llama_model * head, common_context_seq_rm_type target_rm,
                        common_context_seq_rm_type head_rm);

    // Start of a generation on `seq` (its caches are empty): the first row pairs with zeros.
    void reset(llama_seq_id seq);
    // A generation on `seq` that reuses the first `n` positions of the previous one: keep
    // what the head has (or has queued) of them and drop the rest. False when the head
    // does not cover them all (a restored state without the head's rows): then it starts
    // afresh at position n. `h_valid`: the hidden state kept for the row at n is the
    // target's at n - 1 (the previous generation ended exactly there); otherwise it is
    // taken from the hidden states kept of the last positions, or zero beyond them.
    bool keep_prefix(llama_seq_id seq, llama_pos n, bool h_valid);
    // Rows the target just decoded (a prompt chunk of `seq`, positions in order, alone in
    // its batch): decoded into the head's cache with the hidden state of each previous
    // row. Returns llama_process's code (0 = ok).
    int32_t process_prompt(llama_seq_id seq, const common_batch & target_batch);

    // One sequence's draft: up to n_max tokens following `id_last` at `pos`, appended to `out`.
    // With a `grammar` (the call's, copied at its current state), each drafted token is the
    // head's best among those the grammar allows, and text the grammar forces after a drafted
    // token is appended as is (up to `room` tokens in all; counted in `n_forced`), which ends
    // the draft. With a `sampling`, each drafted token is sampled from the head (HeadSampling;
    // among the tokens the grammar allows, if any); otherwise each is the head's argmax.
    using Sampling = HeadSampling;
    struct Request {
        llama_seq_id seq;
        llama_token id_last;
        llama_pos pos;
        int32_t n_max;
        std::vector<llama_token> * out;
        DraftGrammar * grammar = nullptr;
        int32_t room = 0;
        int32_t * n_forced = nullptr;
        const Sampling * sampling = nullptr;
    };
    // Drafts for every request at once: each draft step is one head decode over all the
    // sequences still drafting, and the pending catch-up rows ride in the first one.
    // Returns llama_process's code (0 = ok).
    int32_t draft(const std::vector<Request> & requests);
    // The target verified [id_last, drafts...] of `seq` at rows first_row.. of
    // `verify_batch` and accepted the first n_accepted drafts: drop the head's
    // speculative rows and queue the accepted ones (with the target's hidden states)
    // for the next draft. Rows pile up while the sequence decodes plainly (a call that ends
    // plainly never decodes them); once they hold 8 MiB they are decoded into the head, which
    // so never loses a row. Returns llama_process's code (0 = ok).
    int32_t accept(llama_seq_id seq, const common_batch & verify_batch, int32_t first_row, size_t n_accepted);
    // Rows of `seq` waiting for the head's next decode (the catch-up of its next draft).
    size_t pending_rows(llama_seq_id seq) const { return seqs_[seq].pending_tokens.size(); }
    // Rows the last draft() added to its decodes to keep each one pass (padding()).
    size_t padding_rows() const { return padding_.rows(); }

    // What the driver holds beside the head's cache for one sequence (queued rows, the
    // carried hidden state), saved and restored with it by the session's prompt cache.
    struct Snapshot {
        std::vector<llama_token> tokens;
        std::vector<llama_pos> pos;
        std::vector<float> h, h_last;
        size_t bytes() const { return tokens.size() * 8 + (h.size() + h_last.size()) * sizeof(float); }
    };
    Snapshot snapshot(llama_seq_id seq) const;
    void restore(llama_seq_id seq, const Snapshot & s);

private:
    struct Sequence {
        llama_pos head_from = 0;     // prompt rows before this position are already in the head (or queued)
        // Rows not yet in the head's cache.
        std::vector<llama_token> pending_tokens;
        std::vector<llama_pos> pending_pos;
        std::vector<float> pending_h;  // [rows, n_embd]
        std::vector<float> h_last;     // pairs with the next id_last
        std::vector<float> h_step;     // the head's own state between draft steps
        // The target's hidden states of the last hidden_rows_ committed positions (row
        // pos % hidden_rows_), valid below hidden_end: the head's row that follows a reused
        // prefix pairs with one of them (keep_prefix). Not saved with the prompt cache.
        std::vector<float> hidden;
        llama_pos hidden_end = 0;
        llama_pos drafted_from = -1;   // position of the last draft's first row, -1 if none
        int32_t row = -1;              // this draft step's output row in the head's batch
    };
    void queue(Sequence & s, llama_token token, llama_pos pos, const float * h);
    void remember(Sequence & s, llama_pos pos, const float * h);
    bool has_hidden(llama_seq_id seq, llama_pos pos) const;
    void clear_pending(Sequence & s);
    void add_pending(llama_seq_id seq, size_t first, size_t end);  // pending rows [first, end) into batch_
    int32_t flush(llama_seq_id seq);  // decodes the sequence's pending rows into the head (batches of n_batch)
    float draft_probability(int32_t row);  // the drafted token's probability as llama.cpp's driver sees it
    HeadSampler sampler_;
    int32_t decode_padded();  // decodes batch_, then takes its padding rows out of the head's cache

    llama_context * target_;
    llama_context * head_;
    int32_t n_embd_ = 0;
    const llama_vocab * vocab_;
    int32_t n_vocab_ = 0;
    common_batch batch_;
    float p_min_ = 0.0f;
    llama_pos hidden_rows_;  // positions of hidden states kept per sequence
    size_t pending_limit_;   // queued rows per sequence that are decoded before the next draft asks
    common_sampler_ptr confidence_;  // only with p_min > 0
    std::vector<Sequence> seqs_;
    // Head decodes of several sequences are padded to one pass (padding.hpp).
    bool pads_ = false;
    DecodePadding padding_;      // the decode's padding rows; rows(): those of the last draft()
    std::vector<float> zero_h_;  // the hidden state of a padding row
    std::vector<std::pair<llama_seq_id, int32_t>> segments_;  // a decode's (sequence, rows), scratch
};

}  // namespace mtp
