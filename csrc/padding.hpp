// Shared decodes kept to one pass. With one KV stream per sequence (the session's layout),
// llama.cpp decodes a batch of several sequences in one pass over the weights only when their
// ids are consecutive and their row counts equal (llama_batch_allocr::split_equal, sequential);
// otherwise it makes a pass per run of them (two streams in slots 0 and 2 decode at
// 0.55x the speed of slots 0 and 1). Rows for the sequences in between and after the shorter
// ones cost far less than a pass where weights dominate. The session's verify and the fused
// head's decodes both use this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common.h"
#include "llama.h"

namespace mtp {

// Whether a context of `model` with `n_seq` sequences pads its shared decodes: more than one
// sequence, a cache that rolls back in place (no recurrent state, no sliding window), and
// MTP_LLM_NO_PADDING unset when the session is made (a diagnostic, to measure llama.cpp's split).
bool pads_shared_decodes(const llama_model * model, int32_t n_seq);

// The padding of one decode of `ctx`.
class DecodePadding {
public:
    // The rows per sequence that keep a decode of `segments` (sequence, rows; ascending) one
    // pass; 0 where it is one already, or padding would more than double the rows, exceed the
    // batch or run past a sequence's context (each sequence's rows start at its next position).
    static int32_t rows_per_sequence(llama_context * ctx, const std::vector<std::pair<llama_seq_id, int32_t>> & segments);

    // `n` rows of `seq` (token 0, no output) from position `from`; each row's input embedding is
    // `embd` (n_embd floats) where the context takes one (an MTP head), none otherwise.
    void add(common_batch & batch, llama_seq_id seq, llama_pos from, int32_t n, const float * embd = nullptr,
             size_t n_embd = 0);
    // The rows of `seq` from its next position in `ctx`'s cache: a sequence not in the decode.
    void add_idle(llama_context * ctx, common_batch & batch, llama_seq_id seq, int32_t n, const float * embd = nullptr,
                  size_t n_embd = 0);
    // Takes the rows added since the last drop out of `ctx`'s cache (after the decode, failed or not).
    void drop(llama_context * ctx);
    size_t rows() const { return rows_; }  // added since the last reset
    void reset() { rows_ = 0; }

private:
    std::vector<std::pair<llama_seq_id, llama_pos>> added_;  // (sequence, first position) of each run
    size_t rows_ = 0;
};

}  // namespace mtp
