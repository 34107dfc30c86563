#include "draft_grammar.hpp"

#include <algorithm>
#include <cmath>

#include "llama-ext.h"

namespace mtp {

namespace {

// Learnt splits kept per session (each is one rejected forced draft; a bound, not a budget).
constexpr size_t kMaxSplits = 4096;
constexpr int kMaxSplitDepth = 4;

bool starts_with(const std::string & s, const std::string & prefix) {
    return s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

void ForcedTokenizer::expand(llama_token id, int depth, std::vector<llama_token> & out, llama_token & prev) const {
    const auto it = depth < kMaxSplitDepth && !whole_.count(pair(prev, id)) ? splits_.find(id) : splits_.end();
    if (it == splits_.end()) {
        out.push_back(id);
        prev = id;
        return;
    }
    for (const llama_token part : it->second) {
        expand(part, depth + 1, out, prev);
    }
}

size_t ForcedTokenizer::tokenize(const std::string & text, llama_token prev, size_t max_tokens,
                                 std::vector<llama_token> & out) {
    const size_t before = out.size();
    tokens_ = common_tokenize(vocab_, text, /*add_special=*/false, /*parse_special=*/false);
    for (const llama_token id : tokens_) {
        if (out.size() - before >= max_tokens) {
            break;
        }
        expand(id, 0, out, prev);
    }
    out.resize(std::min(out.size(), before + max_tokens));
    return out.size() - before;
}

void ForcedTokenizer::learn(llama_token prev, const std::vector<llama_token> & drafted, size_t n_forced,
                            const std::vector<llama_token> & ids) {
    const size_t i = ids.size() - 1;  // the first draft the target did not take
    if (n_forced == 0 || i >= drafted.size() || i < drafted.size() - n_forced) {
        return;  // no forced draft was rejected
    }
    const llama_token before = i > 0 ? drafted[i - 1] : prev;
    const std::string draft_piece = common_token_to_piece(vocab_, drafted[i], /*special=*/false);
    const std::string target_piece = common_token_to_piece(vocab_, ids[i], /*special=*/false);
    if (splits_.size() >= kMaxSplits || whole_.size() >= kMaxSplits) {
        splits_.clear();
        whole_.clear();
    }
    if (starts_with(draft_piece, target_piece)) {
        std::vector<llama_token> parts = {ids[i]};
        const llama_tokens rest = common_tokenize(vocab_, draft_piece.substr(target_piece.size()), false, false);
        parts.insert(parts.end(), rest.begin(), rest.end());
        splits_[drafted[i]] = std::move(parts);
        whole_.erase(pair(before, drafted[i]));
    } else if (starts_with(target_piece, draft_piece)) {
        whole_.insert(pair(before, ids[i]));
    }
}

bool DraftGrammar::reset(common_sampler * sampler, ForcedTokenizer * tokenizer, llama_token prev) {
    grammar_.reset(common_sampler_grammar_clone(sampler));
    tokenizer_ = tokenizer;
    prev_ = prev;
    return grammar_ != nullptr;
}

bool DraftGrammar::allows(llama_token id) {
    llama_token_data one = {id, 0.0f, 0.0f};
    llama_token_data_array arr = {&one, 1, -1, false};
    llama_sampler_apply(grammar_.get(), &arr);
    return std::isfinite(one.logit);
}

llama_token DraftGrammar::best_allowed(const float * logits, int32_t n_vocab) {
    const llama_token argmax = (llama_token) (std::max_element(logits, logits + n_vocab) - logits);
    if (allows(argmax)) {
        return argmax;
    }
    // The head's next best candidates (a trimmed head scores only its own ids: the rest are -inf).
    top_.clear();
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (logits[i] > -INFINITY) {
            top_.push_back({i, logits[i], 0.0f});
        }
    }
    // Where they are few, all of them are checked at once (as cheap as a few of a large
    // vocabulary); otherwise only the best kCandidates, and none allowed ends the draft.
    const size_t k = top_.size() <= (size_t) kFullCheck ? top_.size() : std::min(top_.size(), (size_t) kCandidates);
    std::partial_sort(top_.begin(), top_.begin() + (ptrdiff_t) k, top_.end(),
                      [](const llama_token_data & a, const llama_token_data & b) { return a.logit > b.logit; });
    top_.resize(k);
    llama_token_data_array arr = {top_.data(), k, -1, true};
    llama_sampler_apply(grammar_.get(), &arr);
    for (const llama_token_data & c : top_) {  // still in order: the grammar only masks
        if (c.logit > -INFINITY) {
            return c.id;
        }
    }
    return -1;
}

void DraftGrammar::accept(llama_token id) {
    llama_sampler_accept(grammar_.get(), id);
}

size_t DraftGrammar::append_forced(size_t max_tokens, std::vector<llama_token> & out) {
    if (max_tokens == 0) {
        return 0;
    }
    const std::string text = llama_sampler_grammar_forced_text(grammar_.get(), kMaxForcedBytes);
    return text.empty() ? 0 : tokenizer_->tokenize(text, out.empty() ? prev_ : out.back(), max_tokens, out);
}

}  // namespace mtp
