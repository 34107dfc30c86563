#include "target_distribution.hpp"

#include <cmath>

namespace mtp {

void TargetDistribution::begin(common_sampler * sampler, bool grammar) {
    sampler_ = sampler;
    grammar_.reset(grammar ? common_sampler_grammar_clone(sampler) : nullptr);
}

// The chain applied to a row's logits (after the grammar's mask when `masked`), as
// common_sampler_sample applies it: `out` holds its candidates and their probabilities.
void TargetDistribution::chain_over(const float * logits, int32_t n_vocab, bool masked,
                                    std::vector<llama_token_data> & cells, llama_token_data_array & out) {
    cells.resize((size_t) n_vocab);
    for (int32_t v = 0; v < n_vocab; ++v) {
        cells[(size_t) v] = {v, logits[v], 0.0f};
    }
    out = {cells.data(), cells.size(), -1, false};
    if (masked) {
        llama_sampler_apply(grammar_.get(), &out);
    }
    llama_sampler_apply(common_sampler_get(sampler_), &out);
}

const std::vector<std::pair<llama_token, double>> & TargetDistribution::at(llama_context * ctx, int32_t row) {
    p_.clear();
    if (!grammar_) {
        // The chain's own pass (its draw is not used): its candidates' p, left by its last stage.
        common_sampler_sample(sampler_, ctx, row, false);
        const llama_token_data_array * p = common_sampler_get_candidates(sampler_, false);
        for (size_t k = 0; k < p->size; ++k) {
            if (p->data[k].p > 0.0f) {
                p_.emplace_back(p->data[k].id, (double) p->data[k].p);
            }
        }
        return p_;
    }
    const float * logits = llama_get_logits_ith(ctx, row);
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
    llama_token_data_array p;
    chain_over(logits, n_vocab, false, cells_, p);
    verdicts_.clear();
    for (size_t k = 0; k < p.size; ++k) {
        if (p.data[k].p > 0.0f) {
            verdicts_.push_back({p.data[k].id, 0.0f, p.data[k].p});
        }
    }
    llama_token_data_array verdicts = {verdicts_.data(), verdicts_.size(), -1, false};
    llama_sampler_apply(grammar_.get(), &verdicts);  // a rejected token's logit becomes -inf
    double rejected = 0.0;
    for (const llama_token_data & c : verdicts_) {
        if (std::isfinite(c.logit)) {
            p_.emplace_back(c.id, (double) c.p);
        } else {
            rejected += (double) c.p;
        }
    }
    if (rejected == 0.0) {
        return p_;
    }
    // A rejected draw is drawn again over the allowed tokens: their chain distribution, weighted.
    dense_.assign((size_t) n_vocab, 0.0);
    touched_.clear();
    for (const auto & [id, pv] : p_) {
        dense_[(size_t) id] = pv;
        touched_.push_back(id);
    }
    llama_token_data_array p_g;
    chain_over(logits, n_vocab, true, masked_cells_, p_g);
    for (size_t k = 0; k < p_g.size; ++k) {
        const llama_token id = p_g.data[k].id;
        if (p_g.data[k].p > 0.0f && std::isfinite(p_g.data[k].logit)) {
            if (dense_[(size_t) id] == 0.0) {
                touched_.push_back(id);
            }
            dense_[(size_t) id] += rejected * (double) p_g.data[k].p;
        }
    }
    p_.clear();
    for (const llama_token id : touched_) {
        p_.emplace_back(id, dense_[(size_t) id]);
    }
    return p_;
}

void TargetDistribution::accept(llama_token id) {
    if (grammar_) {
        llama_sampler_accept(grammar_.get(), id);
    }
}

}  // namespace mtp
