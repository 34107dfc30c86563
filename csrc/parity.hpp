// Every-position outputs of a target and its MTP head, for checking an exported
// model against its reference implementation (mtp_llm.parity).
#pragma once

#include <cstdint>
#include <vector>

#include "model.hpp"

namespace mtp {

struct ForwardResult {
    int32_t n_tokens = 0, n_vocab = 0, n_embd = 0;
    std::vector<float> trunk_logits;  // [n_tokens, n_vocab]
    std::vector<float> trunk_hidden;  // [n_tokens, n_embd], the post-norm state the head consumes
    std::vector<float> head_logits;   // [n_tokens, n_vocab]: row i predicts token i+2 from (h_{i-1}, token i)
    std::vector<float> head_hidden;   // [n_tokens, n_embd]
};

// Parameters of a context of its own for one pass over `n_tokens` tokens of one sequence, in
// decodes of at most `n_batch` rows (n_threads <= 0: every core). Used by scoring.cpp too.
llama_context_params one_pass_context_params(int32_t n_tokens, int32_t n_batch, int32_t n_threads);

// `head` is the model holding the MTP head (the target itself, or a sidecar).
ForwardResult forward_with_head(const Model & target, const Model & head, const std::vector<int32_t> & tokens,
                                int32_t n_threads);

// The trunk's post-final-norm hidden state of every position of each sequence (the state an MTP
// head consumes), each sequence decoded alone in one reused context: [T_i * n_embd] per sequence.
// Training data for heads; no logits or head pass (forward_with_head's cost without them).
std::vector<std::vector<float>> trunk_hidden_states(const Model & target,
                                                    const std::vector<std::vector<int32_t>> & sequences,
                                                    int32_t n_threads);

}  // namespace mtp
