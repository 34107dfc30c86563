// The distribution a call's sampler draws each token from in plain decoding, row by row along a
// verified draft, for verification by rejection (Session::sample_by_rejection).
//
// Without a grammar it is the chain's candidates (penalties, top-k, top-p, min-p, temperature).
// Under a grammar, llama.cpp draws from the chain and, when the grammar rejects the draw, draws
// again from the chain over the tokens the grammar allows (common_sampler_sample), so a token x
// comes with probability P(x) = p(x) A(x) + (1 - sum_v p(v) A(v)) p_g(x): p the chain's
// distribution, A the grammar's verdict, p_g the chain's distribution over the allowed tokens.
// The grammar is followed through a copy, moved past each accepted token; the call's sampler
// moves as in plain decoding (the caller accepts each token into it).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "llama.h"
#include "sampling.h"

namespace mtp {

class TargetDistribution {
public:
    // Before a round's rows. `grammar`: the call samples under one.
    void begin(common_sampler * sampler, bool grammar);
    // The distribution of row `row` of `ctx`'s last decode, given the tokens accepted so far:
    // (token, probability) pairs with probability > 0.
    const std::vector<std::pair<llama_token, double>> & at(llama_context * ctx, int32_t row);
    // The row's token was `id` (the copy of the grammar follows it).
    void accept(llama_token id);

private:
    struct Free {
        void operator()(llama_sampler * s) const { llama_sampler_free(s); }
    };
    void chain_over(const float * logits, int32_t n_vocab, bool masked, std::vector<llama_token_data> & cells,
                    llama_token_data_array & out);

    common_sampler * sampler_ = nullptr;
    std::unique_ptr<llama_sampler, Free> grammar_;
    std::vector<std::pair<llama_token, double>> p_;
    // Scratch, kept to allocate nothing per row.
    std::vector<llama_token_data> cells_, masked_cells_, verdicts_;
    std::vector<double> dense_;
    std::vector<llama_token> touched_;
};

}  // namespace mtp
