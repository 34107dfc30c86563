// Scoring a given text: the log-probability of each token given the ones before it, as
// llama-perplexity computes them (natural log of the softmax of the raw logits).
#pragma once

#include <cstdint>
#include <vector>

#include "model.hpp"

namespace mtp {

// logprob[i] = log P(tokens[i + 1] | tokens[0..i]) under `model` (tokens.size() - 1 values),
// decoded in a context of its own in batches of `n_batch` rows: memory stays at one batch of
// logits whatever the length. Throws Error(InvalidPrompt) for fewer than two tokens.
std::vector<float> score_tokens(const Model & model, const std::vector<int32_t> & tokens, int32_t n_batch,
                                int32_t n_threads);

}  // namespace mtp
